#!/usr/bin/env python3
"""POSIX/Linux conformance checker for a directory: object types, symlinks,
hard links, errno rules, rename, O_TRUNC and sizes, times, user.* xattrs.

    python3 posix_check.py DIR [--as-user nobody] [--only SUBSTRING] [--keep] [-v]

Every case runs in a fresh subdirectory of DIR (its working directory while it
runs, so paths in messages are short). One line per failed case, then
`posix_check: N cases, N passed, N failed`; exit status 0 only when none failed.

The expectations are what Linux does on ext4 and tmpfs, never what one
filesystem happens to do: the checker must pass on a local directory, as
root and unprivileged. Privileges:
  - as root, every case runs; the cases about other users' files fork a child
    that drops to `nobody` for the checks (DIR must be searchable by it);
  - `--as-user USER` (started as root): root prepares the other-user fixtures,
    then a child drops to USER (setgroups/setgid/setuid) and runs every case;
  - started unprivileged (e.g. under setpriv), the cases that need a fixture
    owned by another user are skipped (listed with -v).
On a kvcfs mount (fstype fuse.kvc) its read-only layout attributes are checked too.
The cases live in posix_check_names.py and posix_check_data.py, their helpers
in posix_check_lib.py. Standard library only."""
import argparse
import os
import pwd
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import posix_check_names  # noqa: E402,F401 - registers its cases (names first)
import posix_check_data  # noqa: E402,F401,I100 - registers its cases
from posix_check_lib import CASES, Context, Skip, describe, drop  # noqa: E402


# ---------------------------------------------------------------- runner

def on_kvcfs(path):
    """The fstype of the mount holding path is fuse.kvc."""
    path, best, fstype = os.path.realpath(path), "", ""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, fstype = point, fields[fields.index("-") + 1]
    return fstype == "fuse.kvc"


def run_case(fn, directory, ctx):
    """None when it passed, a Skip, or the failure's description."""
    home = os.getcwd()
    try:
        os.chdir(directory)
        fn(ctx)
        return None
    except Skip as e:
        return e
    except Exception as e:  # noqa: BLE001 - every failure is the case's
        return describe(e)
    finally:
        os.chdir(home)


def run_all(selected, ctx, verbose):
    """selected: (name, fn, directory, failure of its preparation or None)."""
    count = failed = 0
    for case_name, fn, directory, prepared in selected:
        result = prepared and f"preparing: {prepared}" or run_case(fn, directory, ctx)
        if isinstance(result, Skip):
            if verbose:
                print(f"posix_check: skipped {case_name} ({result})", flush=True)
            continue
        count += 1
        if result is not None:
            failed += 1
            print(f"FAIL {case_name}: {result}", flush=True)
        elif verbose:
            print(f"ok   {case_name}", flush=True)
    print(f"posix_check: {count} cases, {count - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--as-user", help="started as root: drop to this user for the cases")
    parser.add_argument("--only", action="append", help="cases whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the case directories")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    root = os.geteuid() == 0
    if args.as_user and not root:
        parser.error("--as-user needs root")
    other = pwd.getpwnam(args.as_user or "nobody")
    kvcfs = on_kvcfs(args.dir)
    os.umask(0)
    selected = []
    for case_name, fn, prepare in CASES:
        if args.only and not any(s in case_name for s in args.only):
            continue
        if prepare and not root:
            if args.verbose:
                print(f"posix_check: skipped {case_name} (its fixture needs root)")
            continue
        directory = tempfile.mkdtemp(prefix=case_name + ".", dir=args.dir)
        os.chmod(directory, 0o755)
        prepared = prepare and run_case(prepare, directory, None)
        if args.as_user and not prepare:
            os.chown(directory, other.pw_uid, other.pw_gid)
        selected.append((case_name, fn, directory, prepared))
    if args.as_user:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            drop(other)
            os._exit(run_all(selected, Context(False, other, kvcfs), args.verbose))
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    else:
        status = run_all(selected, Context(root, other, kvcfs), args.verbose)
    if not args.keep:
        for _, _, directory, _ in selected:
            shutil.rmtree(directory, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
