"""What the benchmarks share: the programs they need (tools), a scratch stack and the servers under
test (stack, processes), seeding, load generators and what a load costs (load, cpu, proc,
lock_waits, wal), figures and reports (figures, report, standalone, console), and the two places
of the cluster benchmarks (cluster, writers, tenant_move)."""
