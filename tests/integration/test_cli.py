"""Every command line of kvcfs behaves alike: COMMAND --help prints a usage
naming the command to stdout and exits 0; an unknown option is refused on
stderr, with a hint to --help, and exits 2. No cluster is needed: each
command is run with its configuration pointing nowhere, so one that
ignored --help would fail instead of acting on a real cluster."""
import json
import os
import re
import subprocess

import pytest

from conftest import BUILD, ROOT

ADMIN = ["status", "ls", "stat", "layout", "pool list", "pool show", "pool world",
         "pool bind", "pool unbind", "rank show", "key ls", "key stat", "key delete",
         "key evict", "clear", "fsck", "pool", "rank", "key", "resync", "drain", "undrain",
         "add-host"]
BENCH = ["fs", "ring", "meta", "gpu", "keys", "multihost"]
CLUSTER = ["start", "stop", "status", "restart-daemon"]

# (program, words of the subcommand, name the usage must show)
COMMANDS = (
    [(BUILD / p, [], p) for p in ("kvc-meta", "kvc-storage", "kvc-fuse", "kvc-admin",
                                  "kvc-bench", "kvc-mgmt")]
    + [(BUILD / "kvc-admin", c.split(), f"kvc-admin {c}") for c in ADMIN]
    + [(BUILD / "kvc-bench", [c], f"kvc-bench {c}") for c in BENCH]
    + [(ROOT / "tools" / "kvc-cluster", [], "kvc-cluster")]
    + [(ROOT / "tools" / "kvc-cluster", [c], f"kvc-cluster {c}") for c in CLUSTER]
    + [(ROOT / "tools" / "kvc-setup", [], "kvc-setup"),
       (ROOT / "tools" / "gpu-check", [], "gpu-check")])


def run(program, *args, tmp):
    env = dict(os.environ, KVC_CONFIG=str(tmp / "nowhere.conf"), KVC_DIR=str(tmp),
               KVC_BIN=str(tmp / "no-bin"))
    return subprocess.run([str(program), *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp)


def ids(command):
    return " ".join([command[0].name, *command[1]])


@pytest.mark.parametrize("command", COMMANDS, ids=ids)
def test_help(command, local_tmp):
    program, words, name = command
    out = run(program, *words, "--help", tmp=local_tmp)
    assert out.returncode == 0, out.stderr
    assert name in out.stdout, out.stdout
    assert out.stderr == ""
    assert run(program, *words, "-h", tmp=local_tmp).stdout == out.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=ids)
def test_unknown_option(command, local_tmp):
    program, words, _ = command
    out = run(program, *words, "--no-such-option", tmp=local_tmp)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--no-such-option" in out.stderr and "--help" in out.stderr, out.stderr
    assert out.stdout == ""


@pytest.mark.parametrize("program,args", [
    ("kvc-admin", ["no-such-command"]), ("kvc-admin", ["pool", "no-such-verb"]),
    ("kvc-admin", []), ("kvc-bench", ["no-such-command"]), ("kvc-bench", []),
    ("kvc-admin", ["status", "extra"]), ("kvc-admin", ["pool", "show"]),
    ("kvc-meta", []), ("kvc-storage", ["--config", "x"]), ("kvc-fuse", ["--config"]),
    ("kvc-mgmt", []), ("kvc-mgmt", ["--config", "x"]), ("kvc-admin", ["drain"]),
    ("kvc-admin", ["undrain", "1", "2"]), ("kvc-admin", ["add-host"]),
    ("kvc-admin", ["add-host", "a", "b"]), ("kvc-storage", ["--join"]),
    ("kvc-bench", ["fs", "--size"]), ("kvc-bench", ["meta", "--protocol", "carrier-pigeon"]),
])
def test_wrong_use(program, args, local_tmp):
    """A missing command, operand or option argument: exit 2, the problem
    and the hint on stderr."""
    out = run(BUILD / program, *args, tmp=local_tmp)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith(program) and "--help" in out.stderr, out.stderr


@pytest.mark.parametrize("script,args", [
    ("kvc-cluster", []), ("kvc-cluster", ["no-such-command"]), ("kvc-cluster", ["stop", "--dir"]),
    ("kvc-cluster", ["restart-daemon"]), ("kvc-setup", ["no-such-command"]), ("kvc-setup", []),
    ("gpu-check", []),
])
def test_wrong_use_of_scripts(script, args, local_tmp):
    out = run(ROOT / "tools" / script, *args, tmp=local_tmp)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith(script) and "--help" in out.stderr, out.stderr


@pytest.mark.parametrize("program,known", [("kvc-admin", ADMIN), ("kvc-bench", BENCH)])
def test_every_listed_command_is_tested(program, known, local_tmp):
    """The commands a usage lists are the ones tested above."""
    listed = re.findall(r"^  ([a-z][a-z-]*(?: [a-z]+)?)\b", run(BUILD / program, "--help",
                                                           tmp=local_tmp).stdout, re.M)
    assert listed and set(listed) <= set(known), set(listed) - set(known)


def test_admin_options_after_the_command(cluster):
    """kvc-admin's options may follow its command; fsck takes --repair."""
    assert json.loads(cluster.admin("status", "--json").stdout)["healthy"] is True
    out = cluster.admin("fsck", "--repair")
    assert out.stdout.startswith("page pools: 0 problem"), out.stdout
    out = cluster.admin("pool", "show", "--json", "never-made", "x", check=False)
    assert out.returncode == 2 and "RANK must be a number" in out.stderr, out.stderr
