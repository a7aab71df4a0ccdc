"""Fork server of :mod:`sweet.sandbox` (trusted code; it never runs an answer itself).

Started by ``_pool`` as ``python -S -P -B _server.py CTL_FD`` in a fresh session, clean env and an empty temp
cwd; CTL_FD is one end of a SOCK_SEQPACKET socketpair.  Once: it loads ``_child`` and ``_confine`` from next to
this file, reads its setup (the whitelist, the size of the per-answer tmpfs), enters private net, mount and pid
namespaces with the private root (``_confine.server_namespaces``), and forks the *server proper*, pid 1 of the
new pid namespace.  The first process only waits for it (it is the pid the parent holds; killing it kills the
server through PR_SET_PDEATHSIG, and the death of a pid namespace's init kills every process in it).

Per answer, messages on CTL (from the parent only: nothing else holds the other end):
  parent -> server  b"F" + SCM_RIGHTS [req_r, res_w]   fork one child for these pipes; the child keeps only them
                                                       (as fds 3 and 4), confines itself (``confine_forked``:
                                                       own mount+IPC namespaces and tmpfs cwd, Landlock, uid,
                                                       seccomp, rlimits) and runs ``_child.serve``: the parent
                                                       then talks to it directly, as to a spawned child
  parent -> server  b"K" + grace seconds               wait up to grace for it to exit, SIGKILL everything in
  server -> parent  b"X" + exit code (Popen style)     the pid namespace but the server, reap, report
End of input on CTL (the parent closed it, exited or died): kill everything in the namespace and exit.
The server does not reap a child before the parent's "K", and only the server signals, so no pid is recycled
under a kill; an answer cannot signal the server (other uid) nor reach CTL (closed in the child).
"""
import gc
import os
import select
import signal
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PR_SET_PDEATHSIG = 1
FD_BASE = 100  # where the server keeps the whitelist's O_PATH fds for its children's Landlock rules


def _load(name):
    path = os.path.join(HERE, name)
    ns = {"__name__": name[:-3]}
    with open(path, encoding="utf-8") as fh:
        exec(compile(fh.read(), path, "exec"), ns)
    return ns


def _reap(pid, grace):
    """Exit code of child ``pid`` (Popen style: -signal), after ``grace`` seconds to exit on its own."""
    if grace > 0:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pass
        else:
            select.select([pidfd], [], [], grace)
            os.close(pidfd)
    _kill_all()
    try:
        status = os.waitpid(pid, 0)[1]  # before any other reaping, which could take its status
    except ChildProcessError:
        status = None
    _reap_strays()
    return None if status is None else os.waitstatus_to_exitcode(status)


def _kill_all():
    """SIGKILL every process of this pid namespace but us (we are its init)."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap_strays():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def _answer(fds, child, conf, ready):
    """In the forked child: keep only the two pipes, confine, then run the answer (never returns)."""
    layers, cwd, opened, readable = ready
    try:
        os.setsid()  # its own group and session, as a spawned child has
        req_fd, fd = child["_renumber"](*fds)  # 3 and 4; the server's CTL (if it sat there) is closed by this
        os.closerange(5, FD_BASE)  # everything else the server held but the whitelist's O_PATH fds, which
        os.closerange(FD_BASE + len(opened), 1 << 20)  # are closed once Landlock is in force
        null = os.open("/dev/null", os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(null, target)
        os.close(null)
        req = child["_recv"](req_fd)
        if req is None:
            os._exit(0)
        got = layers + conf["confine_forked"](req["cfg"], cwd, opened, readable)
        os.closerange(5, 1 << 20)
        conf["limits"](req["cfg"])
    except BaseException:
        os._exit(70)  # the parent reports "refused to run (sandbox setup failed)"
    child["serve"](req_fd, fd, req, got)
    os._exit(0)


def serve(ctl, child, conf, ready):
    pid = None
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 64, 2)
        except OSError:
            msg, fds = b"", []
        if not msg:
            _kill_all()
            _reap_strays()
            os._exit(0)
        if msg[:1] == b"F" and len(fds) == 2:
            if pid is not None:  # the parent always says "K" first; be safe if it did not
                _reap(pid, 0.0)
            try:
                pid = os.fork()
            except OSError:
                pid = None  # the pipes close below: the parent sees end of input, asks "K", gets 70
            if pid == 0:
                ctl.detach()  # so that no garbage collection in the child closes what is fd 3 by then
                _answer(fds, child, conf, ready)
        elif msg[:1] == b"K":
            rc = _reap(pid, float(msg[1:])) if pid is not None else 70
            pid = None
            ctl.send(b"X" + str(rc).encode())
        for f in fds:
            os.close(f)


def main():
    import fcntl

    low = fcntl.fcntl(int(sys.argv[1]), fcntl.F_DUPFD_CLOEXEC, 3)  # its number was the parent's: may be >= FD_BASE
    os.close(int(sys.argv[1]))
    ctl = socket.socket(fileno=low)
    import marshal

    cfg = marshal.loads(ctl.recv(1 << 20))
    child, conf = _load("_child.py"), _load("_confine.py")
    cwd = os.getcwd()
    try:
        layers = conf["server_namespaces"](cfg, cwd)
    except OSError as e:
        ctl.send(marshal.dumps({"error": str(e)[:200]}))
        os._exit(70)
    alive_r, alive_w = os.pipe()  # the server proper sees end of input here if we died before its PDEATHSIG
    pid = os.fork()
    if pid:
        ctl.close()
        os.close(alive_r)
        status = os.waitpid(pid, 0)[1]
        os._exit(os.waitstatus_to_exitcode(status) & 0x7F)
    os.close(alive_w)
    conf["_libc"].prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if select.select([alive_r], [], [], 0)[0]:
        os._exit(0)
    os.close(alive_r)
    try:  # what every child would otherwise redo: the Landlock rules, the seccomp program, module imports
        opened = []
        for i, (fd, access, path) in enumerate(conf["landlock_open"](cfg["ro"], cfg["devs"])):
            os.dup2(fd, FD_BASE + i, inheritable=False)  # out of the way of the pipes and contiguous
            os.close(fd)
            opened.append((FD_BASE + i, access, path))
        conf["_SECCOMP"].append(conf["_seccomp_prog"]())
        readable = conf["world_readable"](cfg["ro"])
        import _posixsubprocess, posix, resource  # noqa: F401  (for child["_stub"] and conf["limits"])
    except (OSError, ImportError) as e:
        ctl.send(marshal.dumps({"error": str(e)[:200]}))
        os._exit(70)
    gc.freeze()  # the children's collections then leave the server's objects alone: fewer copy-on-write faults
    ctl.send(marshal.dumps({"layers": layers}))
    serve(ctl, child, conf, (layers, cwd, opened, readable))


if __name__ == "__main__":
    main()
