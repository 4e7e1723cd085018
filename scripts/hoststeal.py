"""CPU time the hypervisor stole from this VM, for the compare scripts'
reports: on a shared host, a run during which neighbours took a few percent
or more spreads wider than usual and every engine runs slower."""


def cpu_times():
    """(steal, total) jiffies of all CPUs from /proc/stat (zeros elsewhere)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return (0, 0)
    steal = fields[7] if len(fields) > 7 else 0
    # guest time is already counted in user time
    return (steal, sum(fields[:8]))


def percent_since(start):
    """Steal as a percentage of CPU time since `start` (a `cpu_times()`)."""
    steal, total = cpu_times()
    elapsed = total - start[1]
    return 100.0 * (steal - start[0]) / elapsed if elapsed > 0 else 0.0
