"""The ``ep-host`` command's supervising parent: it forks, waits for the child that does the
work and, when the child dies inside plugin code (``os._exit``, a segfault), says which provider
and hook were running. The Python API cannot watch its own process: there faulthandler's stack
is all there is (process isolation of providers is a later step).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

from ep_host import plugin_calls

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # prctl option: the signal this process gets when its parent dies


def wanted() -> bool:
    """Whether to supervise: on systems with ``fork``, unless ``EP_HOST_SUPERVISE=0``."""
    flag = os.environ.get("EP_HOST_SUPERVISE", "").strip().lower()
    return hasattr(os, "fork") and flag not in ("0", "false", "no", "off")


def supervise() -> int | None:
    """Fork. In the child: ``None`` (go on with the command; the marker is live and
    faulthandler on). In the parent: the exit code to end with once the child is gone."""
    marker = plugin_calls.HookMarker()
    parent = os.getpid()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # nothing buffered before the fork is written twice
    try:
        child = os.fork()
    except OSError:
        return None  # no process to spare: run unsupervised
    if child == 0:
        _die_with(parent)
        plugin_calls.marker = marker
        faulthandler.enable()
        return None
    return _watch(child, marker)


def _die_with(parent: int) -> None:
    """Have the kernel kill this child when the parent goes (Linux), so that killing the
    ``ep-host`` process the user started never leaves the work running."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the parent forwards what it can
    if os.getppid() != parent:  # the parent was gone before prctl took effect
        os._exit(128 + signal.SIGKILL)


def _watch(child: int, marker: plugin_calls.HookMarker) -> int:
    sent: list[int] = []

    def forward(signum: int, frame: object) -> None:
        if signum == signal.SIGINT and _from_terminal():
            return  # the terminal's ^C reached the child too; once is enough
        sent.append(signum)
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # ignored (nohup): stays ignored
            signal.signal(signum, forward)
    _, status = os.waitpid(child, 0)
    return verdict(status, marker.read(), sent)


def _from_terminal() -> bool:
    """Whether a SIGINT here most likely came from the terminal's ^C, which the kernel sends
    to the whole foreground process group (this process and the child alike)."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
        except OSError:
            continue
    return False


def verdict(status: int, running: tuple[str, str, str] | None, sent: list[int]) -> int:
    """The exit code for the child's wait ``status``; when the child died in plugin code or
    by a signal nobody sent it, a line on stderr says how (and in which provider and hook)."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        code = 128 + signum
        if signum in sent:
            return code  # the user stopped it; the child had its say
        how = describe_signal(signum)
    else:
        code = os.WEXITSTATUS(status)
        if running is None:
            return code
        how = f"exit status {code}"
        code = code or 1
    where = "the process died"
    if running is not None:
        provider, hook, node = running
        where = f"provider {provider!r} died in hook {hook}" if provider else f"{hook} died"
        if node:
            where += f" (node {node!r})" if provider else f" ({node!r})"
    print(f"ep-host: {where}: {how}", file=sys.stderr, flush=True)
    return code


def describe_signal(signum: int) -> str:
    """``"SIGSEGV (Segmentation fault)"``."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    text = signal.strsignal(signum)
    return f"{name} ({text})" if text else name
