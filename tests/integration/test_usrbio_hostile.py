"""USRBIO against hostile local clients (docs/usrbio.md): a process that
squats the control socket's name receives nothing from other users'
clients."""
import errno
import os
import pwd
import random
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import BUILD, LIBKVC, ROOT, wait_until

TOOLS = BUILD / "tests" / "usrbio"
PYTHON_PATH = str(ROOT / "tools" / "python")


def run(*args, timeout=120, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def registrations(cluster):
    out = run("getfattr", "-n", "user.kvc.usrbio", "--only-values", cluster.mount).stdout
    return dict(kv.split("=") for kv in out.split())


FAKE_SERVER = r"""
import socket, struct, sys
HEADER = struct.Struct("<IHHQiIQ")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(b"\0" + sys.argv[1].encode())
s.listen(8)
print("listening", flush=True)
fds = frames = 0
conn, _ = s.accept()
conn.settimeout(20)
try:
    while True:
        msg, anc, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(16 * 4))
        if not msg:
            break
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += len(data) // 4
        frames += 1
        magic, version, kind, rid = HEADER.unpack_from(msg)[:4]
        body = b"" if kind == 1 else bytes(8)   # HELLO: no body; else a handle
        conn.sendall(HEADER.pack(magic, version, kind, rid, 0, len(body), 0) + body)
except (OSError, struct.error):
    pass
print(f"frames={frames} fds={fds}", flush=True)
"""

CLIENT = r"""
import errno, os, sys
sys.path.insert(0, sys.argv[2])
import kvcfs
try:
    kvcfs.Iov.create(sys.argv[1], 1 << 20)
    print("registered")
except OSError as e:
    print(errno.errorcode[e.errno])
"""


def test_client_refuses_a_control_socket_of_another_user(cluster, local_tmp):
    """Another user binds the control socket's (predictable) name first: a
    client finds it, sees a peer that is neither root nor the mount's owner
    and refuses before sending a byte, let alone a file descriptor."""
    bind = tempfile.mkdtemp(prefix="kvc-bind-")
    nobody = pwd.getpwnam("nobody")
    assert run("mount", "--bind", cluster.mount, bind).returncode == 0
    fake = None
    try:
        fake = subprocess.Popen(["setpriv", f"--reuid={nobody.pw_uid}",
                                 f"--regid={nobody.pw_gid}", "--clear-groups", sys.executable,
                                 "-c", FAKE_SERVER, f"kvc-usrbio:{os.path.realpath(bind)}"],
                                stdout=subprocess.PIPE, text=True)
        assert fake.stdout.readline().strip() == "listening"
        out = run(sys.executable, "-c", CLIENT, bind, PYTHON_PATH,
                  env=dict(os.environ, KVC_LIB=str(LIBKVC)), timeout=60)
        assert out.stdout.strip() == "EACCES", out.stdout + out.stderr
        fake.send_signal(signal.SIGINT)
        seen, _ = fake.communicate(timeout=30)
        assert "fds=0" in seen and "frames=0" in seen, seen
    finally:
        if fake:
            fake.kill()
            fake.wait()
        run("umount", "-l", bind)
        os.rmdir(bind)
