"""Launcher + rank_main with tiny scripts: torchrun's environment, argv, logs, exit reports,
tracebacks, and no process left behind, whatever happens."""

import signal
import subprocess
import sys
import textwrap
import time
from multiprocessing.connection import wait
from pathlib import Path

import pytest

from hwmodel.catalogue import lookup_gpu
from launch.launcher import Launcher, LogTail
from launch.program import Program
from wire.control import RankExit
from wire.messages import Batch, Collective, Reply

REPO = Path(__file__).resolve().parents[2]
H100 = lookup_gpu("h100")

REPORT_SCRIPT = """
import os, sys, time
import helper  # a module next to the script: its folder is on sys.path
keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
        "MASTER_ADDR", "MASTER_PORT", "SCENARIO_VAR"]
print(" ".join(f"{k}={os.environ[k]}" for k in keys))
print("argv", sys.argv[1:], "run id", bool(os.environ["TORCHELASTIC_RUN_ID"]))
start = time.perf_counter()
time.sleep(1000)  # virtual: returns at once, the clock moves 1000 s
print(f"slept {time.perf_counter() - start:.0f} s")
print("to stderr", file=sys.stderr)
if os.environ["RANK"] == "1":
    helper.fail()
"""

HELPER = """
def fail():
    raise ValueError("rank 1 gives up")
"""


def write_script(folder: Path, body: str, name: str = "train.py") -> Path:
    script = folder / name
    script.write_text(textwrap.dedent(body))
    return script


def drain(launcher: Launcher, timeout_s: float = 60.0) -> dict[int, list[Batch]]:
    """Play the coordinator until every rank has sent its Exit (or closed): answer each sync
    with its own time, return each rank's batches."""
    batches: dict[int, list[Batch]] = {rank: [] for rank in launcher.connections}
    open_conns = {conn: rank for rank, conn in launcher.connections.items()}
    deadline = time.monotonic() + timeout_s
    while open_conns:
        ready = wait(list(open_conns), max(deadline - time.monotonic(), 0))
        assert ready, f"ranks {sorted(open_conns.values())} neither exited nor sent anything"
        for conn in ready:
            rank = open_conns[conn]
            try:
                batch = conn.recv()
            except EOFError:
                del open_conns[conn]
                continue
            batches[rank].append(batch)
            if batch.sync is not None:
                conn.send(Reply(batch.sync.at_ns))
            if batch.exit is not None:
                del open_conns[conn]
    return batches


def wait_exits(launcher: Launcher, count: int) -> dict[int, RankExit]:
    deadline = time.monotonic() + 30
    while len(launcher.exits) < count and time.monotonic() < deadline:
        launcher.poll(0.5)
    return launcher.exits


def gone(pid: int) -> bool:
    """The process no longer exists (not even as a zombie)."""
    return not Path(f"/proc/{pid}").exists()


def test_ranks_run_as_under_torchrun_and_report_their_exit(tmp_path: Path) -> None:
    write_script(tmp_path, HELPER, "helper.py")
    script = write_script(tmp_path, REPORT_SCRIPT)
    launcher = Launcher(script, ["--lr", "0.1"], {"SCENARIO_VAR": "yes"}, world_size=4,
                        ranks_per_host=2, gpu=H100, out_dir=tmp_path / "out", fake_device=False,
                        master_port=29511)
    with launcher:
        batches = drain(launcher)
        exits = wait_exits(launcher, 4)
    assert {rank: e.returncode for rank, e in exits.items()} == {0: 0, 1: 1, 2: 0, 3: 0}
    for rank in range(4):
        log = launcher.log_path(rank).read_text()
        assert (f"RANK={rank} WORLD_SIZE=4 LOCAL_RANK={rank % 2} LOCAL_WORLD_SIZE=2 "
                f"GROUP_RANK={rank // 2} ROLE_RANK={rank} MASTER_ADDR=127.0.0.1 "
                "MASTER_PORT=29511 SCENARIO_VAR=yes") in log
        assert "argv ['--lr', '0.1'] run id True" in log
        assert "slept 1000 s" in log and "to stderr" in log
        exit_ = batches[rank][-1].exit
        assert exit_ is not None and exit_.status == (1 if rank == 1 else 0)
        # every rank promised at least the 1000 s it slept
        assert batches[rank][-1].clock_ns >= 1000 * 10**9
    traceback = batches[1][-1].exit.traceback
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert f'File "{script}"' in traceback and "helper.py" in traceback
    assert traceback.rstrip().endswith("ValueError: rank 1 gives up")
    assert "runpy" not in traceback and "rank_main" not in traceback
    assert traceback in launcher.log_path(1).read_text()  # printed as the interpreter would
    assert all(gone(pid) for pid in launcher.pids.values())


def test_a_module_runs_as_under_python_m_in_its_working_folder(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "trainer").mkdir(parents=True)
    (work / "trainer" / "__init__.py").write_text("")
    write_script(work / "trainer", """
        import os, sys
        print("cwd", os.getcwd(), "argv0", sys.argv[0], "args", sys.argv[1:])
        print("config", open("config.toml").read())  # relative to the working folder
        raise RuntimeError("stop")
    """, "train.py")
    (work / "config.toml").write_text("steps = 3")
    program = Program(module="trainer.train", workdir=work)
    with Launcher(program, ["--steps", "3"], {}, 1, 1, H100, tmp_path / "out",
                  fake_device=False) as launcher:
        batches = drain(launcher)
        wait_exits(launcher, 1)
    log = launcher.log_path(0).read_text()
    assert f"cwd {work} argv0 {work / 'trainer' / 'train.py'} args ['--steps', '3']" in log
    assert "config steps = 3" in log
    traceback = batches[0][-1].exit.traceback
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert "runpy" not in traceback and "intercept" not in traceback
    assert traceback.rstrip().endswith("RuntimeError: stop")


def test_a_program_that_is_not_there_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="training script .* does not exist"):
        Launcher(tmp_path / "missing.py", [], {}, 1, 1, H100, tmp_path)
    with pytest.raises(FileNotFoundError, match="working folder .* does not exist"):
        Launcher(Program(module="json.tool", workdir=tmp_path / "nowhere"), [], {}, 1, 1, H100,
                 tmp_path)
    with pytest.raises(ValueError, match="exactly one"):
        Program(script=tmp_path / "train.py", module="json.tool")


def test_sys_exit_codes_and_messages(tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import os, sys
        sys.exit({"0": None, "1": 3}.get(os.environ["RANK"], "bad config"))
    """)
    with Launcher(script, [], {}, 3, 3, H100, tmp_path, fake_device=False) as launcher:
        batches = drain(launcher)
        exits = wait_exits(launcher, 3)
    assert [batches[r][-1].exit.status for r in range(3)] == [0, 3, 1]
    assert [exits[r].returncode for r in range(3)] == [0, 3, 1]
    assert launcher.log_path(2).read_text() == "bad config\n"


def test_close_kills_running_ranks_and_their_children(tmp_path: Path) -> None:
    script = write_script(tmp_path, """
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "600"])
        print("child", child.pid, flush=True)
        while True:
            time.sleep(0.01)  # virtual sleep: the script spins on the CPU
    """)
    launcher = Launcher(script, [], {}, 2, 2, H100, tmp_path, fake_device=False)
    launcher.start()
    try:
        tail = launcher.tail(0)
        deadline = time.monotonic() + 30
        lines: list[str] = []
        while not lines and time.monotonic() < deadline:
            lines = tail.read_lines()
            time.sleep(0.05)
        child = int(lines[0].split()[1])
        assert not gone(child)
    finally:
        launcher.close()
    assert all(gone(pid) for pid in [*launcher.pids.values(), child])
    assert launcher.connections == {}


def test_the_fork_server_and_ranks_die_with_the_coordinator(tmp_path: Path) -> None:
    """A coordinator killed with SIGKILL leaves nothing behind (PR_SET_PDEATHSIG)."""
    script = write_script(tmp_path, "import time\nwhile True: time.sleep(1)\n")
    coordinator = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import os, sys, time
            from launch.launcher import Launcher
            from hwmodel.catalogue import lookup_gpu
            launcher = Launcher({str(script)!r}, [], {{}}, 2, 2, lookup_gpu("h100"),
                                {str(tmp_path)!r}, fake_device=False)
            launcher.start()
            print(launcher._server.pid, *launcher.pids.values(), flush=True)
            time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    pids = [int(p) for p in coordinator.stdout.readline().split()]
    assert len(pids) == 3 and not any(gone(pid) for pid in pids)
    coordinator.send_signal(signal.SIGKILL)
    coordinator.wait()
    deadline = time.monotonic() + 10
    while not all(gone(pid) or _zombie(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(pid) or _zombie(pid) for pid in pids)


def _zombie(pid: int) -> bool:
    """Dead, waiting for a parent outside our control to reap it (here: the container's init)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_log_tail_returns_complete_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    tail = LogTail(log)
    assert tail.read_lines() == []  # not created yet
    with log.open("w") as f:
        f.write("step 1\nstep")
        f.flush()
        assert tail.read_lines() == ["step 1"]
        f.write(" 2\n")
        f.flush()
        assert tail.read_lines() == ["step 2"]
        assert tail.read_lines() == []


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    script = write_script(tmp_path, "")
    with pytest.raises(ValueError, match=r"world_size \(6\).*ranks_per_host \(4\)"):
        Launcher(script, [], {}, 6, 4, H100, tmp_path)
    with pytest.raises(ValueError, match="gpus_per_host"):
        Launcher(script, [], {}, 8, 8, H100, tmp_path, gpus_per_host=4)
    with pytest.raises(FileNotFoundError, match="missing.py"):
        Launcher(tmp_path / "missing.py", [], {}, 1, 1, H100, tmp_path)


def test_collectives_of_a_torch_script_reach_the_coordinator(tmp_path: Path) -> None:
    """End to end without the fake device: ranks import torch, the process group turns their
    all_reduce into matching Collective messages."""
    script = write_script(tmp_path, """
        import torch, torch.distributed as dist
        from intercept.distributed.process_group import installed
        with installed():
            dist.init_process_group("nccl")
            t = torch.ones(1024)
            dist.all_reduce(t)
            dist.barrier()
            dist.destroy_process_group()
    """)
    with Launcher(script, [], {}, 2, 2, H100, tmp_path, fake_device=False) as launcher:
        batches = drain(launcher, timeout_s=120)
    per_rank = [[op for b in batches[r] for op in b.ops if isinstance(op, Collective)]
                for r in range(2)]
    assert [[(c.op, c.seq, c.nbytes, c.ranks) for c in ops] for ops in per_rank] == [
        [("all_reduce", 0, 4096, (0, 1)), ("all_reduce", 1, 4, (0, 1))]] * 2
    assert [batches[r][-1].exit.status for r in range(2)] == [0, 0]
    assert sum(1 for b in batches[0] if b.sync is not None) == 1  # the barrier blocked


def test_ctrl_c_in_the_coordinator_stops_and_reaps_everything(tmp_path: Path) -> None:
    """The coordinator takes Ctrl-C as an interactive run does, even where this test runs as a
    background job of a shell without job control (which starts it with SIGINT ignored)."""
    script = write_script(tmp_path, "import time\nwhile True: time.sleep(1)\n")
    coordinator = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import signal
            import time
            signal.signal(signal.SIGINT, signal.default_int_handler)
            from launch.launcher import Launcher
            from hwmodel.catalogue import lookup_gpu
            with Launcher({str(script)!r}, [], {{}}, 2, 2, lookup_gpu("h100"),
                          {str(tmp_path)!r}, fake_device=False) as launcher:
                print(launcher._server.pid, *launcher.pids.values(), flush=True)
                time.sleep(600)
        """)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    pids = [int(p) for p in coordinator.stdout.readline().split()]
    assert len(pids) == 3 and not any(gone(pid) for pid in pids)
    coordinator.send_signal(signal.SIGINT)
    _, stderr = coordinator.communicate(timeout=30)
    assert coordinator.returncode != 0 and "KeyboardInterrupt" in stderr
    assert [pid for pid in pids if not gone(pid)] == []  # reaped by their parents, no zombies
