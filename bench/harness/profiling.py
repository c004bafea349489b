"""py-spy recording the server's worker processes under load, and a text summary of where the
samples fell: the functions with the most time of their own, and with the most time in total
(their own and their callees')."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


class ProfileFailed(Exception):
    pass


@dataclass
class Recording:
    process: subprocess.Popen[bytes]
    output: Path
    log: Path


def start_recording(
    py_spy: str, pid: int, output: Path, log: Path, *, gil_only: bool, rate: int = 100
) -> Recording:
    """py-spy on `pid` and its subprocesses (uvicorn's workers), until `stop_recording`.

    With `gil_only` a sample is kept only when its thread holds the GIL: the Python work that
    bounds a worker's throughput. Without it, every thread py-spy does not judge idle counts,
    which includes threads blocked on a lock or a queue.
    """
    command = [
        py_spy,
        "record",
        "--pid",
        str(pid),
        "--subprocesses",
        "--rate",
        str(rate),
        "--format",
        "speedscope",
        "--output",
        str(output),
        *(["--gil"] if gil_only else []),
    ]
    handle = log.open("wb")
    process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    handle.close()
    time.sleep(2.0)  # let it attach to every worker before the load starts
    if process.poll() is not None:
        raise ProfileFailed(
            f"py-spy exited with {process.returncode} (it needs ptrace: run as root, or set "
            f"kernel.yama.ptrace_scope=0):\n{log.read_text(errors='replace')}"
        )
    return Recording(process, output, log)


def stop_recording(recording: Recording) -> None:
    """SIGINT, on which py-spy writes its file and exits."""
    if recording.process.poll() is None:
        os.kill(recording.process.pid, signal.SIGINT)
        try:
            recording.process.wait(60)
        except subprocess.TimeoutExpired:
            recording.process.kill()
            recording.process.wait(5)
    if not recording.output.exists():
        raise ProfileFailed(
            f"py-spy wrote no profile:\n{recording.log.read_text(errors='replace')}"
        )


def _short(path: str) -> str:
    for marker in ("site-packages/", "lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path.split("/src/", 1)[1] if "/src/" in path else path


def summarize(speedscope: Path, top: int = 40) -> str:
    """The functions by own and by total time, over every sampled thread of every process."""
    document = json.loads(speedscope.read_text())
    frames = document["shared"]["frames"]
    # A function is its name and file; py-spy makes a frame per line within it.
    function_of = [f"{frame['name']} ({_short(frame.get('file') or '?')})" for frame in frames]
    # py-spy roots each stack in a frame naming its process: 100 % of its process, no news.
    is_process = [
        frame["name"].startswith("process ") and not frame.get("file") for frame in frames
    ]
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    seconds = 0.0
    samples = 0
    per_thread: Counter[str] = Counter()
    for profile in document["profiles"]:
        weights = profile.get("weights") or [0.01] * len(profile["samples"])
        for stack, weight in zip(profile["samples"], weights, strict=True):
            if not stack:
                continue
            samples += 1
            seconds += weight
            per_thread[profile.get("name", "?")] += weight
            own[function_of[stack[-1]]] += weight
            for function in {function_of[index] for index in stack if not is_process[index]}:
                total[function] += weight
    if samples == 0:
        raise ProfileFailed(f"{speedscope} holds no samples")

    def block(title: str, counts: Counter[str]) -> list[str]:
        lines = [title, f"{'share':>7}  {'seconds':>8}  function (file)"]
        for function, value in counts.most_common(top):
            lines.append(f"{100 * value / seconds:6.1f}%  {value:8.2f}  {function}")
        return lines

    text = [
        f"{samples} samples, {seconds:.2f} s of thread time, by thread:",
        *(f"  {value:7.2f} s  {name}" for name, value in per_thread.most_common()),
        "",
        *block(f"Top {top} by own time (the function itself was running)", own),
        "",
        *block(f"Top {top} by total time (the function or its callees)", total),
    ]
    return "\n".join(text) + "\n"
