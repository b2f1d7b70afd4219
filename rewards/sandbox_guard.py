"""The guard of a sandboxed run: what a program may not do, as the code that runs first in its child (resource
limits lowered, an audit hook installed, calls without an audit event removed) before the program's first line.

rewards.sandbox starts the child with BOOTSTRAP; the lists below are what it refuses. A refused program ends at
once with REFUSED_EXIT and "sandbox: refused EVENT" on stderr, so it cannot catch the refusal and go on.
"""

from __future__ import annotations

# The exit status the guard ends a refused program with; anything the program itself exits with is an error
REFUSED_EXIT = 97

# Runs first in the child: python -I -S -B -c BOOTSTRAP PROGRAM SCRATCH WRITE_OPENS RLIMITS READ_ROOT...
# (RLIMITS: NAME=SOFT=HARD joined by ";"). Every name the hook uses is bound in its closure at install time,
# so the program cannot change what the hook calls by rebinding builtins or os. No json: its import costs a
# tenth of a run.
_BOOTSTRAP = r"""
import os, resource, sys

def _install():
    program, scratch, write_opens, rlimits = sys.argv[1:5]
    for spec in rlimits.split(";"):
        name, soft, hard = spec.split("=")
        resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
    with open(program, encoding="utf-8", errors="replace") as f:
        source = f.read()
    sys.stdin.reconfigure(encoding="utf-8", errors="replace")
    sys.stdout.reconfigure(encoding="utf-8", errors="replace")
    write_roots = (scratch,)
    read_roots = tuple(sys.argv[5:]) + write_roots
    budget = [int(write_opens)]
    writing_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    deny = frozenset(DENY_EVENTS)
    deny_prefixes = DENY_PREFIXES
    deny_imports = frozenset(DENY_IMPORTS)
    scratch_only = frozenset(SCRATCH_ONLY_EVENTS)
    read_only = frozenset(READ_ONLY_EVENTS)
    exit_now, write_fd, str_, bytes_, int_, type_, repr_ = os._exit, os.write, str, bytes, int, type, repr
    code = REFUSED_EXIT

    def refuse(event):
        write_fd(2, ("\nsandbox: refused " + event + "\n").encode("utf-8", "replace"))
        exit_now(code)

    def resolve(path):
        # Lexical, from the scratch folder (the working directory, which the program cannot change): the
        # scratch folder holds no links, since making one is refused.
        kind = type_(path)
        if kind is bytes_:
            path = path.decode("utf-8", "surrogateescape")
        elif kind is not str_:
            return None
        if not path.startswith("/"):
            path = scratch + "/" + path
        parts = []
        for part in path.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    def within(path, roots):
        path = resolve(path)
        if path is None:
            return False
        for root in roots:
            if path == root or path.startswith(root + "/"):
                return True
        return False

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if type_(path) is int_:
                return
            by_mode = type_(mode) is str_ and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)
            if flags & writing_flags or by_mode:
                if budget[0] <= 0 or not within(path, write_roots):
                    refuse("open for writing " + repr_(path))
                budget[0] -= 1
            elif not within(path, read_roots):
                refuse("open " + repr_(path))
        elif event == "import":
            if args[0] in deny_imports:
                refuse("import " + str_(args[0]))
        elif event in deny or event.startswith(deny_prefixes):
            refuse(event)
        elif event in scratch_only or event in read_only:
            roots = write_roots if event in scratch_only else read_roots
            for arg in args:
                kind = type_(arg)
                if (kind is str_ or kind is bytes_) and not within(arg, roots):
                    refuse(event + " " + repr_(arg))

    # Calls that reach other processes without an audit event of their own: gone from the modules that hold
    # them (a fresh import of those modules is refused above)
    import _signal, posix
    for module in (os, posix):
        for name in UNAUDITED_OS:
            module.__dict__.pop(name, None)
    for name in UNAUDITED_SIGNAL:
        _signal.__dict__.pop(name, None)
    sys.addaudithook(hook)
    return source

def _run():
    source = _install()
    program = compile(source, "main.py", "exec")
    del source
    exec(program, {"__name__": "__main__", "__builtins__": __builtins__})

_run()
"""

# Audit events refused outright, and by prefix
DENY_EVENTS = (
    "os.system",
    "os.exec",
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.spawn",
    "os.kill",
    "os.killpg",
    "os.startfile",
    "subprocess.Popen",
    "pty.spawn",
    "os.chdir",
    "os.chmod",
    "os.chown",
    "os.chflags",
    "os.link",
    "os.symlink",
    "os.mkfifo",
    "os.mknod",
    "os.setxattr",
    "os.removexattr",
    "sys.addaudithook",
    "sys.settrace",
    "sys.setprofile",
    "resource.setrlimit",
    "resource.prlimit",
    "signal.pthread_kill",
    "webbrowser.open",
    "urllib.Request",
    "ftplib.connect",
    "smtplib.connect",
    "telnetlib.Telnet.open",
    "poplib.connect",
    "imaplib.open",
    "nntplib.connect",
)
DENY_PREFIXES = ("socket.", "ctypes.", "gc.", "sqlite3.", "_winapi.", "winreg.", "msvcrt.", "http.client.")
# Modules that reach the C level or start processes without raising an audit event of their own
DENY_IMPORTS = (
    "posix",
    "_signal",
    "ctypes",
    "_ctypes",
    "_posixsubprocess",
    "_testcapi",
    "_testinternalcapi",
    "_xxsubinterpreters",
    "_xxinterpchannels",
    "cffi",
    "_cffi_backend",
    "readline",  # reads and writes history files in C
    "_ssl",  # reads certificate files in C
)
# Functions that act on other processes (by pid) and raise no audit event: removed before the program runs
UNAUDITED_OS = (
    "pidfd_open",
    "setpriority",
    "sched_setaffinity",
    "sched_setscheduler",
    "sched_setparam",
    "setpgid",
    "setpgrp",
    "setsid",
    "tcsetpgrp",
    "chroot",
    "setns",
    "unshare",
)
UNAUDITED_SIGNAL = ("pidfd_send_signal",)
# Events whose path arguments must lie in the scratch folder (changes), or be readable (listings)
SCRATCH_ONLY_EVENTS = (
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.truncate",
    "os.utime",
    "shutil.rmtree",
    "shutil.copyfile",
    "shutil.copymode",
    "shutil.copystat",
    "shutil.move",
    "shutil.make_archive",
    "shutil.unpack_archive",
    "dbm.open",
)
READ_ONLY_EVENTS = ("os.listdir", "os.scandir", "glob.glob", "glob.glob/2")

BOOTSTRAP = _BOOTSTRAP
for _name, _value in (
    ("REFUSED_EXIT", REFUSED_EXIT),
    ("DENY_EVENTS", DENY_EVENTS),
    ("DENY_PREFIXES", DENY_PREFIXES),
    ("DENY_IMPORTS", DENY_IMPORTS),
    ("SCRATCH_ONLY_EVENTS", SCRATCH_ONLY_EVENTS),
    ("READ_ONLY_EVENTS", READ_ONLY_EVENTS),
    ("UNAUDITED_OS", UNAUDITED_OS),
    ("UNAUDITED_SIGNAL", UNAUDITED_SIGNAL),
):
    BOOTSTRAP = BOOTSTRAP.replace(_name, repr(_value))
