"""Standard tools as a shell user types them, through bash, on the mount:
redirections, cp, truncate, ln, mkfifo, mv, cp -a, tar, rsync, setfattr,
an editor's save-by-rename, touch. Results are checked byte for byte and with
stat. Every scenario also runs on a local directory (the `place` parameter
`local`), so a scenario that is wrong about Linux is seen there."""
import hashlib
import os
import shutil
import stat
import subprocess
import time

import pytest

ENV = {**os.environ, "TZ": "UTC", "LC_ALL": "C"}


def sh(script, cwd, check=True, quiet=False):
    """script through bash in cwd, stopping at the first failing command;
    quiet: it must not complain on stderr either (a tool's warnings)."""
    out = subprocess.run("set -eo pipefail\n" + script, shell=True, executable="/bin/bash",
                         cwd=cwd, capture_output=True, text=True, timeout=300, env=ENV)
    if check:
        assert out.returncode == 0, f"exited {out.returncode}: {out.stderr}\nin: {script.strip()}"
    if quiet:
        assert out.stderr == "", f"complained: {out.stderr}\nin: {script.strip()}"
    return out


def stdout(script, cwd):
    return sh(script, cwd).stdout


@pytest.fixture(params=["kvcfs", "local"])
def place(request):
    """A fresh directory on the mount, or on a local filesystem (self-check)."""
    return request.getfixturevalue("workdir" if request.param == "kvcfs" else "local_tmp")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def user_xattrs(path):
    """user.* xattrs, less kvcfs's own read-only user.kvc.* (not the data's)."""
    names = [n for n in os.listxattr(path, follow_symlinks=False)
             if n.startswith("user.") and not n.startswith("user.kvc.")]
    return {n: os.getxattr(path, n, follow_symlinks=False) for n in sorted(names)}


def manifest(top):
    """Every object under top: type, mode, owner, size, sha256, link target,
    nlink, the first name of its hard-link group, user xattrs, file mtime."""
    entries, first_name = {}, {}
    for directory, dirs, files in os.walk(top):
        for n in sorted(dirs + files):
            path = os.path.join(directory, n)
            rel = os.path.relpath(path, top)
            st = os.lstat(path)
            entry = {"type": stat.S_IFMT(st.st_mode), "mode": stat.S_IMODE(st.st_mode),
                     "owner": (st.st_uid, st.st_gid)}
            if stat.S_ISREG(st.st_mode):
                entry.update(size=st.st_size, sha256=sha256(path), nlink=st.st_nlink,
                             group=first_name.setdefault(st.st_ino, rel),
                             mtime=int(st.st_mtime))
            if stat.S_ISLNK(st.st_mode):
                entry["target"] = os.readlink(path)
            else:
                entry["xattrs"] = user_xattrs(path)
            entries[rel] = entry
    return entries


def assert_same_tree(src, dst):
    want, got = manifest(src), manifest(dst)
    assert sorted(got) == sorted(want), "names differ"
    for rel in want:
        assert got[rel] == want[rel], f"{rel}: copy {got[rel]} != source {want[rel]}"


def make_tree(top):
    """Files (one over several 1 MiB chunks), an empty dir, relative, absolute
    and dangling symlinks, a hard-link pair, a fifo, user xattrs, odd modes."""
    top.mkdir(exist_ok=True)
    sh("""
    mkdir -p dir/sub empty private
    head -c 3000017 /dev/urandom > dir/big
    printf 'small\\n' > small
    : > zero
    printf '#!/bin/sh\\necho hi\\n' > dir/sub/script
    chmod 755 dir/sub/script; chmod 600 small; chmod 700 private; chmod 750 dir
    ln -s small rel-link
    ln -s ../small dir/up-link
    ln -s /etc/hostname abs-link
    ln -s missing dangling
    ln small hard-twin
    mkfifo pipe
    setfattr -n user.tag -v hello small
    setfattr -n user.bin -v 0x00ff00 dir/big
    setfattr -n user.dirtag -v d dir
    touch -d '2020-01-02 03:04:05' dir/big small
    """, top)


# ---------------------------------------------------------------- redirections, cp, truncate

def test_echo_overwrite_truncates(place):
    sh('echo "hello world" > f; echo hi > f', place)
    f = place / "f"
    assert stdout("stat -c %s f", place) == "3\n", "size right after the rewrite"
    assert f.read_bytes() == b"hi\n"
    time.sleep(1.5)  # the old size came back "a moment later"
    assert stdout("stat -c %s f", place) == "3\n", "size a moment later"
    assert stdout("cat f", place) == "hi\n" and os.stat(f).st_size == 3


def test_cp_over_an_existing_file(place):
    sh("""
    head -c 3000017 /dev/urandom > big
    head -c 1000 /dev/urandom > small
    cp big longer; cp small longer    # the existing file is longer than the source
    cp small shorter; cp big shorter  # the existing file is shorter than the source
    printf 'previous content' > text; printf 'new' > new; cp new text
    cmp small longer; cmp big shorter; cmp new text
    """, place)
    assert stdout("stat -c %s longer shorter text", place) == "1000\n3000017\n3\n"
    assert sha256(place / "longer") == sha256(place / "small")
    assert sha256(place / "shorter") == sha256(place / "big")
    assert (place / "text").read_bytes() == b"new"


def test_append_redirection(place):
    sh("echo a > f; echo b >> f; printf c >> f; cat f f > g; cat g >> f", place)
    assert (place / "f").read_bytes() == b"a\nb\nca\nb\nca\nb\nc"
    assert stdout("stat -c %s f", place) == "15\n"


def test_truncate_grow_and_shrink(place):
    sh("printf abc > f; truncate -s 10000 f", place)
    assert (place / "f").read_bytes() == b"abc" + b"\0" * 9997
    sh("truncate -s 2 f", place)
    assert (place / "f").read_bytes() == b"ab"
    sh("truncate -s +3 f", place)
    assert (place / "f").read_bytes() == b"ab\0\0\0", "regrown: zeros, not the old bytes"
    sh("head -c 3000000 /dev/urandom > big; cp big copy; truncate -s 1500000 big; "
       "truncate -s 2500000 big; cmp -n 1500000 big copy", place)
    data = (place / "big").read_bytes()
    assert len(data) == 2500000 and data[1500000:] == b"\0" * 1000000
    sh("truncate -s 0 big", place)
    assert stdout("stat -c %s big", place) == "0\n" and (place / "big").read_bytes() == b""


# ---------------------------------------------------------------- links, fifos, mv

def test_symlink_readlink_cat(place):
    sh("printf 'through the link\\n' > target; ln -s target link; "
       "ln -s \"$PWD/target\" abs", place)
    assert stdout("readlink link", place) == "target\n"
    assert stdout("readlink abs", place) == f"{place}/target\n"
    assert stdout("cat link abs", place) == "through the link\n" * 2
    assert stdout("stat -c %F link", place) == "symbolic link\n"
    assert stdout("stat -L -c %F link", place) == "regular file\n"
    assert stdout("readlink -f link", place) == f"{os.path.realpath(place)}/target\n"
    sh("echo more >> link", place)
    assert (place / "target").read_bytes() == b"through the link\nmore\n"


def test_ln_sf_replaces_a_symlink(place):
    sh("mkdir d1 d2; echo a > a; echo b > b; ln -s a l; ln -sf b l; "
       "ln -s d1 ld; ln -sfn d2 ld", place)
    assert stdout("readlink l; cat l; readlink ld", place) == "b\nb\nd2\n"
    assert os.listdir(place / "d1") == [], "ln -sfn wrote into the old target"


def test_hard_link(place):
    sh("echo one > f; ln f g", place)
    assert stdout("stat -c %h f; stat -c %h g", place) == "2\n2\n"
    assert stdout("stat -c %i f", place) == stdout("stat -c %i g", place)
    sh("echo two >> g", place)
    assert stdout("cat f", place) == "one\ntwo\n"
    sh("rm f", place)
    assert stdout("stat -c %h g; cat g", place) == "1\none\ntwo\n"


def test_mkfifo_writer_and_reader(place):
    sh("mkfifo p", place)
    assert stdout("stat -c %F p", place) == "fifo\n"
    assert stdout("(echo through the fifo > p &); timeout 20 cat p", place) == "through the fifo\n"
    assert stdout("seq 1 20000 > p & timeout 20 md5sum < p; wait", place) == \
        stdout("seq 1 20000 | md5sum", place)


def test_mv_over_each_type(place):
    sh("""
    echo new > f1; echo old > f2; mv f1 f2
    echo file > f3; echo t > t; ln -s t l1; mv f3 l1
    ln -s t l2; echo file > f4; mv l2 f4
    mkfifo p; echo file > f5; mv p f5
    mkdir -p da/x db; mv -T da db
    mkdir -p dc/y; echo file > f6
    """, place)
    kinds = stdout("stat -c '%n %F' f2 l1 f4 f5 db db/x", place)
    assert kinds == ("f2 regular file\nl1 regular file\nf4 symbolic link\nf5 fifo\n"
                     "db directory\ndb/x directory\n")
    assert stdout("cat f2 l1; readlink f4", place) == "new\nfile\nt\n"
    assert not (place / "f1").exists() and not (place / "da").exists()
    assert sh("mv -T dc db", place, check=False).returncode != 0, "dir over non-empty dir"
    assert sh("mv -T f6 db", place, check=False).returncode != 0, "file over dir"
    assert sh("mv -T dc f6", place, check=False).returncode != 0, "dir over file"
    assert stdout("ls dc db; cat f6", place) == "db:\nx\n\ndc:\ny\nfile\n"


def test_editor_save_by_rename(place):
    sh("printf 'version 1\\n' > doc; ln -s doc view; ln doc doc.hardlink", place)
    ino = os.stat(place / "doc").st_ino
    sh("printf 'version 2, longer than before\\n' > doc.tmp && sync doc.tmp && "
       "mv doc.tmp doc", place)
    assert stdout("cat doc; cat view", place) == "version 2, longer than before\n" * 2
    assert os.stat(place / "doc").st_ino != ino and not (place / "doc.tmp").exists()
    assert stdout("cat doc.hardlink; stat -c %h doc.hardlink", place) == "version 1\n1\n"
    time.sleep(1.5)
    assert stdout("stat -c %s doc", place) == "30\n"


def test_touch_times(place):
    sh("echo x > f; touch -d '2001-02-03 04:05:06.789' f", place)
    assert stdout("stat -c '%y|%x' f", place) == \
        "2001-02-03 04:05:06.789000000 +0000|2001-02-03 04:05:06.789000000 +0000\n"
    sh("touch -m -d '2010-01-01 00:00:01' f; touch -a -d '2011-01-01 00:00:02' f", place)
    assert stdout("stat -c '%y|%x' f", place) == \
        "2010-01-01 00:00:01.000000000 +0000|2011-01-01 00:00:02.000000000 +0000\n"
    sh("touch ref; touch -d '1999-12-31 23:59:59' ref; touch -r ref g", place)
    assert stdout("stat -c %Y g", place) == stdout("stat -c %Y ref", place) == "946684799\n"
    sh("ln -s f l; touch -h -d '2005-05-05 05:05:05' l", place)
    assert stdout("stat -c %Y l; stat -L -c %Y f", place) == "1115269505\n1262304001\n"


def test_setfattr_getfattr(place):
    sh("echo x > f; setfattr -n user.x -v y f; setfattr -n user.other -v 'two words' f", place)
    assert stdout("getfattr -n user.x --only-values f", place) == "y"
    dump = stdout("getfattr -d f", place)
    assert 'user.x="y"' in dump and 'user.other="two words"' in dump
    sh("setfattr -x user.x f", place)
    missing = sh("getfattr -n user.x f", place, check=False)
    assert missing.returncode != 0 and "No such attribute" in missing.stderr
    assert "user.x" not in stdout("getfattr -d f", place)
    sh("mkdir d; setfattr -n user.on-dir -v 1 d", place)
    assert stdout("getfattr -n user.on-dir --only-values d", place) == "1"


# ---------------------------------------------------------------- tree copies

def test_cp_a_tree(place):
    make_tree(place / "src")
    sh("cp -a src dst", place, quiet=True)
    assert_same_tree(place / "src", place / "dst")
    assert stdout("stat -c %i dst/small dst/hard-twin | uniq | wc -l", place) == "1\n"
    sh("cmp src/dir/big dst/dir/big", place)


def test_tar_round_trip(place):
    make_tree(place / "src")
    sh("mkdir dst; tar --xattrs -C src -cf - . | tar --xattrs -C dst -xpf -", place, quiet=True)
    assert_same_tree(place / "src", place / "dst")


def test_rsync_round_trip(place):
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (tools/kvc-setup installs it)")
    make_tree(place / "src")
    sh("rsync -aHX src/ dst/", place, quiet=True)
    assert_same_tree(place / "src", place / "dst")
    again = stdout("rsync -aHXi src/ dst/", place)
    assert again == "", f"a second rsync still finds differences:\n{again}"


def test_rsync_local_to_mount(workdir, local_tmp):
    if shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (tools/kvc-setup installs it)")
    make_tree(local_tmp / "src")
    sh(f"rsync -aHX {local_tmp}/src/ dst/", workdir, quiet=True)
    assert_same_tree(local_tmp / "src", workdir / "dst")
    again = stdout(f"rsync -aHXi {local_tmp}/src/ dst/", workdir)
    assert again == "", f"a second rsync still finds differences:\n{again}"


# ---------------------------------------------------------------- another client

def test_rewrite_seen_by_another_client(cluster, workdir):
    from conftest import drop_second_mount, second_mount, wait_until
    proc, mount2 = second_mount(cluster)
    other = os.path.join(mount2, workdir.relative_to(cluster.mount))
    try:
        sh('echo "hello world" > f', workdir)
        assert stdout("cat f; stat -c %s f", other) == "hello world\n12\n"
        sh("echo hi > f", workdir)
        assert wait_until(lambda: os.stat(os.path.join(other, "f")).st_size == 3, timeout=10), \
            f"the other client sees {os.stat(os.path.join(other, 'f')).st_size} bytes"
        assert stdout("cat f", other) == "hi\n"
        time.sleep(1.5)
        assert stdout("stat -c %s f; cat f", other) == "3\nhi\n"
        assert stdout("stat -c %s f", workdir) == "3\n"
        sh('echo "a longer line than before" > g; echo ok > g', other)
        assert wait_until(lambda: os.stat(workdir / "g").st_size == 3, timeout=10)
        assert stdout("cat g", workdir) == "ok\n"
    finally:
        drop_second_mount(proc, mount2)
