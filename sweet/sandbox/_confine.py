"""Confinement layers for :mod:`sweet.sandbox._child` (trusted code; runs in the child BEFORE the answer;
the parent ships it compiled in its first message).

Applied in this order, each best effort, and reported back to the parent by name:

``netns``     (root) a private network namespace with nothing in it (loopback down, no routes).
``mountns``   (root) a private mount namespace whose root is a fresh read-only tmpfs holding only read-only bind
              mounts of what the interpreter needs (the parent's whitelist: its stdlib dirs, /usr/lib*, zoneinfo,
              ld.so.cache, /dev/{null,zero,urandom,random}) and, at the path of the temp cwd, an empty
              size-capped tmpfs owned by the sandbox uid.  The project, /tmp, /dev/shm, /proc (so
              /proc/<parent>/environ), /home, /root... do not exist in it; files the answer writes vanish with the
              child.  ``pivot_root`` (``chroot`` if that is refused) then drops the old root.
``landlock``  (any user, kernel >= 5.13) a Landlock domain: read-only under the same whitelist, read-write only
              under the cwd and on the /dev files; with ABI >= 4 no TCP bind/connect; with ABI >= 6 no signals
              to, and no abstract unix sockets of, processes outside the sandbox.  Applies to root too.
``uid``       (root) drop to a per-child unused uid/gid with no capabilities (CAP_DAC_READ_SEARCH only when the
              whitelisted interpreter dirs are not world-readable) and no_new_privs.
``seccomp``   (any user, x86_64) a filter failing with EPERM the syscalls nothing here needs and that would widen
              the kernel surface or undo the layers above: fork/clone/exec, unshare/setns, mount and friends,
              chroot, ptrace, bpf, userfaultfd, io_uring, keyrings, perf, modules, kexec...
Then rlimits (CPU, AS, FSIZE, CORE=0, NPROC=0 so no fork and no threads, NOFILE).

Under the fork server (``_server``) the work splits in two: ``server_namespaces`` (once per server: netns, a
mount namespace holding the same private root but an empty dir at the cwd, and a pid namespace whose init is the
server) and ``confine_forked`` (in each forked child, before the answer: its own mount and IPC namespaces with a
fresh size-capped tmpfs at the cwd, then Landlock, the uid drop and seccomp exactly as above).
"""
import ctypes
import os
import struct

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC = 0x00020000, 0x40000000, 0x20000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
SYS_LL_CREATE, SYS_LL_ADD, SYS_LL_RESTRICT = 444, 445, 446  # the same number on every architecture
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
PR_SET_KEEPCAPS, PR_SET_NO_NEW_PRIVS = 8, 38
LL_FILE = 1 | 2 | 4 | (1 << 14) | (1 << 15)  # rights that apply to a file: execute, write, read, truncate, ioctl_dev
LL_READ = 4 | 8  # read_file, read_dir

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(ret, what):
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret


def _b(s):
    return None if s is None else s.encode()


def _mount(src, dst, fstype, flags, data=None):
    _check(_libc.mount(_b(src), _b(dst), _b(fstype), ctypes.c_ulong(flags), _b(data)), f"mount {dst}")


def world_readable(paths):
    import stat

    for p in paths:
        st = os.stat(p)
        if not st.st_mode & (stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)):
            return False
    return True


def _bind(src, root, ro=True, dev=False):
    dst = root + src
    if os.path.islink(src):  # recreate the link itself; its target is whitelisted on its own
        if not os.path.lexists(dst):
            os.symlink(os.readlink(src), dst)
        return
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.close(os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644))
    _mount(src, dst, None, MS_BIND)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | (MS_RDONLY if ro else 0) | (0 if dev else MS_NODEV)
    _mount(None, dst, None, flags)


def work_tmpfs(path, uid, gid, work_mb):
    opts = f"mode=0700,size={work_mb}m,nr_inodes=4096" + (f",uid={uid},gid={gid}" if uid is not None else "")
    _mount("sbx-work", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts)


def private_root(cwd, ro, devs, uid, gid, work_mb):
    """In a fresh mount namespace (already unshared): build a minimal root on a tmpfs mounted over ``cwd`` (an
    empty dir of ours), pivot into it, and chdir to the same path, now an empty private tmpfs.  Returns False
    (view restored) if a step before the pivot fails; raises OSError if the pivot itself half-fails."""
    root, bound = cwd, []
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        os.umask(0o022)
        _mount("sbx-root", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m,nr_inodes=4096")
    except OSError:
        return False
    try:
        for p in sorted(ro, key=lambda s: (s.count("/"), s)):  # parents before children
            if any(p.startswith(b + "/") for b in bound):
                continue  # already visible through the bind of a parent dir
            os.makedirs(root + os.path.dirname(p), exist_ok=True)
            _bind(p, root)
            if os.path.isdir(p) and not os.path.islink(p):
                bound.append(p)
        for d in devs:
            os.makedirs(root + os.path.dirname(d), exist_ok=True)
            _bind(d, root, ro=False, dev=True)
        os.makedirs(root + cwd, exist_ok=True)
        if work_mb is not None:  # None: the fork server, whose children each mount their own (``confine_forked``)
            work_tmpfs(root + cwd, uid, gid, work_mb)
        _mount(None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:
        os.chdir("/")
        _libc.umount2(_b(root), 2)  # MNT_DETACH: drop the half-built root with everything bound into it
        os.chdir(cwd)
        return False
    os.chdir(root)
    if SYS_PIVOT_ROOT and _libc.syscall(SYS_PIVOT_ROOT, b".", b".") == 0:
        _check(_libc.umount2(b".", 2), "umount old root")  # MNT_DETACH: the old root was stacked on top of ours
    else:
        os.chroot(".")  # e.g. the current root is not a mount point; safe once the capabilities are gone
    os.chdir("/")
    os.chdir(cwd)
    return True


def landlock(ro, devs, rw_dir, opened=None):
    """Restrict this process (and anything it could start) to the whitelist.  Returns the ABI used, 0 if none.
    ``opened``: ``landlock_open(ro, devs)``, done once by the fork server (only ``rw_dir`` is opened here)."""
    abi = _libc.syscall(SYS_LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        return 0
    fs = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0) | (1 << 15 if abi >= 5 else 0)
    net, scoped = (3 if abi >= 4 else 0), (3 if abi >= 6 else 0)  # tcp bind+connect; abstract unix + signals
    attr = struct.pack("=QQQ", fs, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    buf = ctypes.create_string_buffer(attr, len(attr))
    rfd = _check(_libc.syscall(SYS_LL_CREATE, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)), "landlock")
    mine = landlock_open((), (), rw_dir, fs) + ([] if opened is not None else landlock_open(ro, devs))
    try:
        for fd, access, path in (opened or []) + mine:
            rule = ctypes.create_string_buffer(struct.pack("=Qi", access & fs, fd), 12)
            _check(_libc.syscall(SYS_LL_ADD, ctypes.c_int(rfd), ctypes.c_int(1), rule, ctypes.c_uint32(0)), path)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _check(_libc.syscall(SYS_LL_RESTRICT, ctypes.c_int(rfd), ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(rfd)
        for fd, _, _ in mine:
            os.close(fd)
    return abi


def landlock_open(ro, devs, rw_dir=None, fs=0):
    """[(O_PATH fd, access, path)] for the rules: read-only under ``ro``, read-write on ``devs`` and (rights
    ``fs``) under ``rw_dir``.  A path not there for us gets no rule: no access to it is the safe side."""
    out = []
    rules = [(p, LL_READ) for p in ro] + [(d, 2 | 4 | (1 << 14) | (1 << 15)) for d in devs]
    for path, access in rules + ([(rw_dir, fs)] if rw_dir is not None else []):
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        out.append((fd, access if os.path.isdir(path) else access & LL_FILE, path))
    return out


class _CapHdr(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("eff", ctypes.c_uint32), ("perm", ctypes.c_uint32), ("inh", ctypes.c_uint32)]


def drop_uid(uid, gid, keep_caps):
    """setresgid/setresuid to an unused id keeping only ``keep_caps``.  Exits 70 if half-dropped."""
    Hdr, Data = _CapHdr, _CapData
    try:
        _libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0)
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        data = (Data * 2)()
        data[0].eff = data[0].perm = keep_caps
        _check(_libc.capset(ctypes.byref(Hdr(0x20080522, 0)), data), "capset")  # _LINUX_CAPABILITY_VERSION_3
    except OSError:
        if os.getuid() != 0:
            os._exit(70)  # half-dropped: refuse to run anything
        return False
    finally:
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    return os.getuid() != 0 and os.geteuid() != 0


# x86_64 syscalls the answer never needs and that widen the kernel surface or undo the other layers: process
# creation and exec (also covers threads), namespaces, mounts, chroot, ptrace and cross-process memory, bpf,
# userfaultfd, io_uring, keyrings, perf, file handles, modules, kexec, reboot, swap, syslog, acct, quotactl.
_DENY_SYSCALLS = (56, 57, 58, 59, 322, 435, 272, 308, 165, 166, 155, 161, 428, 429, 430, 431, 432, 433, 442, 101,
                  310, 311, 321, 323, 425, 426, 427, 248, 249, 250, 298, 303, 304, 175, 176, 313, 246, 320, 169,
                  167, 168, 103, 163, 179)


def seccomp():
    """A seccomp filter failing the syscalls above with EPERM (and any non-x86_64 ABI with a kill).  x86_64 only."""
    if os.uname().machine != "x86_64":
        return False
    if not _SECCOMP:  # built once per process (the fork server's children reuse it)
        _SECCOMP.append(_seccomp_prog())
    filt, fprog = _SECCOMP[0]
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _check(_libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    return True


_SECCOMP = []


def _seccomp_prog():
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, 0xC000003E), (ret, 0, 0, kill),  # arch must be AUDIT_ARCH_X86_64
            (ld, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # x32 syscalls
    for nr in _DENY_SYSCALLS:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
    prog.append((ret, 0, 0, allow))
    filt = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *ins) for ins in prog), 8 * len(prog))
    return filt, struct.pack("=HxxxxxxQ", len(prog), ctypes.addressof(filt))  # keep filt: fprog points into it


def confine(cfg):
    """Apply every layer that works here; return the names of those in force."""
    layers = []
    root = os.geteuid() == 0 and cfg.get("uid") is not None
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    ro, devs = cfg["ro"], cfg["devs"]  # computed by the parent (``_proc.whitelist``)
    cwd = os.getcwd()
    keep = cfg.get("keep_caps", 0)
    if root:
        ns = CLONE_NEWNET | (CLONE_NEWNS if cfg.get("mountns", True) else 0)
        if _libc.unshare(ns) != 0 and ns != CLONE_NEWNET:
            ns = CLONE_NEWNET if _libc.unshare(CLONE_NEWNET) == 0 else 0
        if ns & CLONE_NEWNET:
            layers.append("netns")
        try:
            if ns & CLONE_NEWNS and private_root(cwd, ro, devs, cfg["uid"], cfg["gid"], cfg.get("work_mb", 32)):
                layers.append("mountns")
                if world_readable(ro):
                    keep = 0  # the dirs above the whitelisted ones are now ours (0755): no capability needed
        except OSError:
            os._exit(70)  # the pivot half-failed: refuse rather than guess what is still visible
    return layers + _last_layers(cfg, cwd, root, keep)


def _last_layers(cfg, cwd, root, keep, opened=None):
    """Landlock, the uid drop and seccomp: the layers that each child applies to itself, in both modes."""
    layers = []
    if cfg.get("landlock", True):
        try:
            abi = landlock(cfg["ro"], cfg["devs"], cwd, opened)
        except OSError:
            os._exit(70)
        if abi:
            layers.append(f"landlock{abi}")
    if root and drop_uid(cfg["uid"], cfg["gid"], keep):
        layers.append("uid")
    if cfg.get("seccomp", True):
        try:
            if seccomp():
                layers.append("seccomp")
        except OSError:
            pass  # an older kernel: the other layers stand
    return layers


def server_namespaces(cfg, cwd):
    """The fork server's share of layer 1, done once: private net, mount and pid namespaces (the pid one applies
    to the server's children; the first becomes their init) and the private root with an empty, read-only dir at
    ``cwd``.  Probes the per-answer tmpfs once.  Raises OSError if anything is refused (the parent then spawns)."""
    _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID), "unshare")
    if not private_root(cwd, cfg["ro"], cfg["devs"], None, None, None):
        raise OSError("private root refused")
    work_tmpfs(cwd, cfg["uid"], cfg["gid"], cfg["work_mb"])  # what each child will do: fail now, not per answer
    _check(_libc.umount2(_b(cwd), 2), "umount probe")
    return ["netns", "mountns", "pidns"]


def confine_forked(cfg, cwd, opened, readable):
    """In a child of the fork server, before the answer: its own mount and IPC namespaces (SysV/POSIX IPC objects
    outlive a process; no later answer may find them) with a fresh tmpfs owned by its uid at ``cwd``, then the
    layers of ``_last_layers`` (``opened``: the server's ``landlock_open(ro, devs)``; ``readable``: its
    ``world_readable(ro)``).  Exits 70 when the private cwd cannot be had (the server probed it at start)."""
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    try:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        work_tmpfs(cwd, cfg["uid"], cfg["gid"], cfg.get("work_mb", 32))
        os.chdir(cwd)  # into the new mount; the server's dir below it stays empty
    except OSError:
        os._exit(70)
    keep = 0 if readable else cfg.get("keep_caps", 0)
    return ["ipcns"] + _last_layers(cfg, cwd, True, keep, opened)


def limits(cfg):
    import resource as R  # imported by the fork server already; a spawned child pays for it here

    for res, val in ((R.RLIMIT_CPU, cfg["cpu_s"]), (R.RLIMIT_AS, cfg["memory_mb"] << 20),
                     (R.RLIMIT_FSIZE, cfg["fsize"]), (R.RLIMIT_CORE, 0), (R.RLIMIT_NPROC, 0), (R.RLIMIT_NOFILE, 64)):
        hard = R.getrlimit(res)[1]
        val = val if hard == R.RLIM_INFINITY else min(val, hard)
        try:
            R.setrlimit(res, (val, val))
        except (ValueError, OSError):
            pass
