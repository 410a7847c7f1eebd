"""tfcluster.backends.oom: a SIGKILL is called out-of-memory only where the kernel's counters grew."""
from __future__ import annotations

from tfcluster.backends.oom import OomWatch, cgroup_events_path, is_sigkill


def _files(tmp_path, vm=3, cg=0, v1=True):
    vmstat = tmp_path / "vmstat"
    vmstat.write_text(f"nr_free_pages 1\noom_kill {vm}\n")
    root = tmp_path / "cg"
    if v1:
        d = root / "memory" / "job" / "7"
        d.mkdir(parents=True)
        (d / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {cg}\n")
        (tmp_path / "self").write_text("4:memory:/job/7\n1:cpu:/\n0::/\n")
        return vmstat, root, d / "memory.oom_control"
    d = root / "user.slice" / "run"
    d.mkdir(parents=True)
    (d / "memory.events").write_text(f"low 0\nhigh 0\nmax 2\noom 1\noom_kill {cg}\n")
    (tmp_path / "self").write_text("0::/user.slice/run\n")
    return vmstat, root, d / "memory.events"


def test_the_cgroup_file_is_found_for_v1_and_v2(tmp_path):
    for v1 in (True, False):
        sub = tmp_path / str(v1)
        sub.mkdir()
        _, root, events = _files(sub, v1=v1)
        assert cgroup_events_path(str(sub / "self"), str(root)) == str(events)
    (tmp_path / "none").write_text("0::/hidden/by/a/namespace\n")
    assert cgroup_events_path(str(tmp_path / "none"), str(tmp_path)) is None
    assert cgroup_events_path(str(tmp_path / "missing"), str(tmp_path)) is None


def test_only_a_sigkill_with_a_grown_counter_is_called_out_of_memory(tmp_path):
    vmstat, root, events = _files(tmp_path, vm=3, cg=0)
    w = OomWatch(str(vmstat), str(events))
    # nothing grew: a person, a scheduler, another program -- not the OOM killer, and says so
    assert w.words(-9) == (f"not tfcluster, not the OOM killer (its counters did not grow: oom_kill "
                           f"in {vmstat} and {events}); Linux does not say which process sent a SIGKILL")
    vmstat.write_text("oom_kill 4\n")
    assert w.words(-9).startswith("possibly out of memory: the kernel's out-of-memory killer")
    assert w.words(137).startswith("possibly out of memory")
    assert w.words(1) == "" and w.words(-15) == "" and w.words(None) == ""
    events.write_text("oom_kill 1\n")
    assert w.words(-9).startswith("out of memory: the memory limit of the launcher's cgroup")
    assert str(events) in w.words(-9)


def test_unreadable_counters_say_nothing(tmp_path):
    w = OomWatch(str(tmp_path / "no-vmstat"), str(tmp_path / "no-events"))
    assert w.words(-9) == "" and w.grown() == {}
    vmstat, _, _ = _files(tmp_path, vm=3)
    only = OomWatch(str(vmstat), str(tmp_path / "no-events"))     # one counter read: it speaks
    assert only.words(-9).startswith(f"not tfcluster, not the OOM killer (its counters did not grow: "
                                     f"oom_kill in {vmstat});")
    assert is_sigkill(-9) and is_sigkill(137) and not is_sigkill(9)
