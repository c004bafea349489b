"""Fetches again the browser files dealbase ships for /docs and GraphiQL
(src/dealbase/ops/web_pages/assets/) from the npm registry, at the versions its manifest.json
pins, and checks each package's tarball against the integrity pinned beside its version.

    python tools/fetch_web_assets.py           # write the files; drop those no longer pinned
    python tools/fetch_web_assets.py --check   # compare only; exit 1 on any difference

To move a package to another version: set its version and integrity in manifest.json (the
integrity is `npm view NAME@VERSION dist.integrity`), run this, check the pages in a browser,
and update the versions and licences in the README beside the manifest. Needs npm.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import TypedDict

ASSETS = Path(__file__).resolve().parents[1] / "src" / "dealbase" / "ops" / "web_pages" / "assets"
# Files of the folder that are not fetched: written by hand.
OWN_FILES = frozenset({"manifest.json", "README.md", ".gitignore"})


class Package(TypedDict):
    name: str
    version: str
    integrity: str
    license: str
    serve: list[str]
    notices: list[str]


def pinned_packages() -> list[Package]:
    packages: list[Package] = json.loads((ASSETS / "manifest.json").read_text())["packages"]
    return packages


def tarball_of(package: Package, into: Path) -> Path:
    """The package's tarball, downloaded by npm (which checks it against the registry's own
    integrity) and checked here against the pinned one, so a republished or swapped version
    is refused."""
    spec = f"{package['name']}@{package['version']}"
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm is needed: it downloads the packages from the registry")
    # The arguments are the manifest's pins, not a user's input.
    packed = subprocess.run(  # noqa: S603
        [npm, "pack", spec, "--json", "--ignore-scripts", "--pack-destination", str(into)],
        check=True,
        capture_output=True,
        text=True,
    )
    filename: str = json.loads(packed.stdout)[0]["filename"]
    tarball = into / filename
    digest = hashlib.sha512(tarball.read_bytes()).digest()
    integrity = "sha512-" + base64.b64encode(digest).decode()
    if integrity != package["integrity"]:
        sys.exit(f"{spec}: the tarball's integrity is {integrity}, not {package['integrity']}")
    return tarball


def files_of(package: Package, tarball: Path) -> dict[Path, bytes]:
    """The files the manifest names, by their path in the assets folder (name@version/...)."""
    folder = Path(f"{package['name']}@{package['version']}")
    files: dict[Path, bytes] = {}
    with tarfile.open(tarball) as archive:
        for name in [*package["serve"], *package["notices"]]:
            member = archive.getmember(f"package/{name}")
            content = archive.extractfile(member) if member.isfile() else None
            if content is None:
                sys.exit(f"{folder}: {name} is not a regular file in the tarball")
            files[folder / name] = content.read()
    return files


def vendored_files() -> set[Path]:
    return {
        path.relative_to(ASSETS)
        for path in ASSETS.rglob("*")
        if path.is_file() and path.relative_to(ASSETS).as_posix() not in OWN_FILES
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    check = parser.parse_args().check
    wanted: dict[Path, bytes] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for package in pinned_packages():
            wanted |= files_of(package, tarball_of(package, Path(scratch)))
    stale = vendored_files() - set(wanted)
    differing = [path for path, content in wanted.items() if _read(ASSETS / path) != content]
    if check:
        for path in sorted(differing):
            print(f"differs from the registry's: {path}")
        for path in sorted(stale):
            print(f"not pinned: {path}")
        return 1 if differing or stale else 0
    for path in differing:
        (ASSETS / path).parent.mkdir(parents=True, exist_ok=True)
        (ASSETS / path).write_bytes(wanted[path])
    for path in stale:
        (ASSETS / path).unlink()
    for folder in sorted(ASSETS.rglob("*"), reverse=True):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    print(f"{len(differing)} written, {len(stale)} removed, {len(wanted)} files pinned")
    return 0


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


if __name__ == "__main__":
    sys.exit(main())
