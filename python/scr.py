"""The SCR API for Python (scr-rs), with the functions and behaviour of SCR's own scr.py.

Use it inside an MPI program, after MPI is initialised, e.g. with mpi4py:

    from mpi4py import MPI
    import scr

    scr.init()
    name = scr.have_restart()              # the checkpoint SCR loaded, or None
    if name:
        scr.start_restart()
        path = scr.route_file("ckpt/rank_0")  # where the file really is
        ...                                 # read it
        scr.complete_restart(True)          # False on any rank: SCR offers the next one
    scr.start_output("ckpt.7", scr.FLAG_CHECKPOINT)
    path = scr.route_file("ckpt.7/rank_0")  # a path in node-local cache
    ...                                     # write it
    ok = scr.complete_output(True)          # True on every rank if every rank succeeded
    scr.finalize()

All calls are collective over MPI_COMM_WORLD except config() and route_file(). Names and
semantics follow the C API (SCR user guide, section 2.5):

    config(conf)            query ("SCR_FLUSH"), set ("SCR_FLUSH=10") or unset ("SCR_FLUSH=")
                            a parameter, before init(); returns the value (str) of a query,
                            None if unset and for a set or unset
    init(params=None)       SCR_Init; params (str, list of str, or dict, None unsets) are passed
                            to config() first
    finalize()              SCR_Finalize
    have_restart()          name of the loaded checkpoint, or None
    start_restart()         name of the loaded checkpoint
    complete_restart(valid) True if every process restarted successfully
    need_checkpoint()       True if a checkpoint should be taken now
    start_output(name, flags)  flags: FLAG_CHECKPOINT, FLAG_OUTPUT or their sum; name may be
                            None (SCR names the dataset)
    route_file(name)        the path to open for name (in a restart phase: any file of the
                            checkpoint, whoever wrote it)
    route_shared_file(name) the path to open for a file several processes write together in
                            this output phase (scr-rs; written in the prefix, the same path
                            on every process)
    restart_info()          (processes that wrote the checkpoint being restarted, its number of
                            files); in a restart phase (scr-rs)
    restart_file(i)         (path in the prefix, writer) of file i, 0 <= i < files; writer -1
                            for a shared file (scr-rs)
    complete_output(valid)  True if every process wrote its part successfully
    should_exit()           True if the application should stop (scr_halt, time limit)
    current(name), delete(name), drop(name)   dataset management

A call that fails raises RuntimeError naming it ("SCR_Init failed"); the library has printed
why on stderr. config() raises too on a malformed string or a bad value (SCR's module returns
None there, which hides the mistake). complete_output() and complete_restart() return False
rather than raise, as SCR's module does: a dataset some process could not write is an answer,
not an error.

Which libscr: the one already in the process if there is one (transparent mode under
LD_PRELOAD=libscr_preload.so, or a program linked with libscr that embeds Python), so a
process never holds two SCR runtimes; else the file named by the LIBSCR environment variable;
else <prefix>/lib/libscr.so of the installation this file belongs to
(<prefix>/share/scr/python/scr.py); else libscr.so on the dynamic loader's path
(LD_LIBRARY_PATH).

Why ctypes: it is in the standard library, so nothing needs to be compiled or installed on the
compute nodes (SCR's module needs the cffi package); the API is a few functions taking ints
and strings, and a call's overhead (microseconds) is nothing next to the collective work each
SCR call does.
"""

import ctypes
import os

__all__ = [
    "FLAG_NONE", "FLAG_CHECKPOINT", "FLAG_OUTPUT", "config", "init", "finalize", "route_file",
    "route_shared_file", "have_restart", "start_restart", "complete_restart", "restart_info",
    "restart_file", "need_checkpoint", "start_output", "complete_output", "should_exit",
    "current", "delete", "drop",
]

FLAG_NONE = 0
FLAG_CHECKPOINT = 1
FLAG_OUTPUT = 2

_SUCCESS = 0
_MAX_FILENAME = 1024


def _find_libscr():
    process = ctypes.CDLL(None)
    if hasattr(process, "SCR_Init") and hasattr(process, "scr_rs_config"):
        return process
    tried = []
    candidates = []
    if os.environ.get("LIBSCR"):
        candidates.append(os.environ["LIBSCR"])
    here = os.path.dirname(os.path.realpath(__file__))
    candidates.append(os.path.join(here, "..", "..", "..", "lib", "libscr.so"))
    for path in candidates:
        path = os.path.normpath(path)
        if os.path.exists(path):
            return ctypes.CDLL(path)
        tried.append(path)
    try:
        return ctypes.CDLL("libscr.so")
    except OSError as e:
        tried.append("libscr.so on the loader's path (%s)" % e)
    raise ImportError("scr: cannot find libscr.so; tried " + "; ".join(tried)
                      + " (set LIBSCR to its path)")


_lib = _find_libscr()
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None

_int_p = ctypes.POINTER(ctypes.c_int)
for _name, _args in [
    ("SCR_Init", []), ("SCR_Finalize", []),
    ("SCR_Route_file", [ctypes.c_char_p, ctypes.c_char_p]),
    ("SCR_Route_shared_file", [ctypes.c_char_p, ctypes.c_char_p]),
    ("SCR_Restart_info", [_int_p, _int_p]),
    ("SCR_Restart_file", [ctypes.c_int, ctypes.c_char_p, _int_p]),
    ("SCR_Have_restart", [_int_p, ctypes.c_char_p]),
    ("SCR_Start_restart", [ctypes.c_char_p]),
    ("SCR_Complete_restart", [ctypes.c_int]),
    ("SCR_Need_checkpoint", [_int_p]),
    ("SCR_Start_output", [ctypes.c_char_p, ctypes.c_int]),
    ("SCR_Complete_output", [ctypes.c_int]),
    ("SCR_Should_exit", [_int_p]),
    ("SCR_Current", [ctypes.c_char_p]), ("SCR_Delete", [ctypes.c_char_p]),
    ("SCR_Drop", [ctypes.c_char_p]),
    ("scr_rs_config", [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
]:
    _f = getattr(_lib, _name)
    _f.argtypes = _args
    _f.restype = ctypes.c_int


def _check(rc, call):
    if rc != _SUCCESS:
        raise RuntimeError(call + " failed")


def _flag(func, call):
    flag = ctypes.c_int(0)
    _check(func(ctypes.byref(flag)), call)
    return bool(flag.value)


def config(conf):
    """Query ("KEY", "CKPT=0 TYPE"), set ("KEY=VALUE") or unset ("KEY=") a parameter.

    Returns the value of a query as str, or None when the parameter is not set; None after a
    set or unset. Raises RuntimeError when SCR_Config fails (malformed string, bad value, a
    set after init()).
    """
    value = ctypes.c_void_p()
    _check(_lib.scr_rs_config(conf.encode(), ctypes.byref(value)), "SCR_Config")
    if not value.value:
        return None
    try:
        text = ctypes.string_at(value.value).decode()
    finally:
        _libc.free(value)
    return text or None


def init(params=None):
    """SCR_Init. params: a config string, a list of them, or a dict (a None value unsets)."""
    if params:
        if isinstance(params, str):
            config(params)
        elif isinstance(params, list):
            for p in params:
                config(str(p))
        elif isinstance(params, dict):
            for k, v in params.items():
                config("%s=%s" % (k, "" if v is None else v))
        else:
            raise RuntimeError("scr.init params argument type must be 'str', 'list', or 'dict', got: "
                               + str(type(params)))
    _check(_lib.SCR_Init(), "SCR_Init")


def finalize():
    """SCR_Finalize: flush what is owed and shut SCR down."""
    _check(_lib.SCR_Finalize(), "SCR_Finalize")


def route_file(name):
    """The path to open for file `name` (registered with the dataset in an output phase)."""
    buf = ctypes.create_string_buffer(_MAX_FILENAME)
    _check(_lib.SCR_Route_file(os.fsencode(name), buf), "SCR_Route_file")
    return os.fsdecode(buf.value)


def route_shared_file(name):
    """The path to open for file `name`, which several processes write in this output phase."""
    buf = ctypes.create_string_buffer(_MAX_FILENAME)
    _check(_lib.SCR_Route_shared_file(os.fsencode(name), buf), "SCR_Route_shared_file")
    return os.fsdecode(buf.value)


def restart_info():
    """(processes that wrote the checkpoint being restarted, its number of files)."""
    ranks, nfiles = ctypes.c_int(0), ctypes.c_int(0)
    _check(_lib.SCR_Restart_info(ctypes.byref(ranks), ctypes.byref(nfiles)), "SCR_Restart_info")
    return ranks.value, nfiles.value


def restart_file(i):
    """(path in the prefix, writer) of file `i` of the checkpoint; writer is -1 for a shared file."""
    buf = ctypes.create_string_buffer(_MAX_FILENAME)
    writer = ctypes.c_int(0)
    _check(_lib.SCR_Restart_file(int(i), buf, ctypes.byref(writer)), "SCR_Restart_file")
    return os.fsdecode(buf.value), writer.value


def have_restart():
    """The name of the checkpoint SCR loaded for the application to read, or None."""
    flag = ctypes.c_int(0)
    buf = ctypes.create_string_buffer(_MAX_FILENAME)
    _check(_lib.SCR_Have_restart(ctypes.byref(flag), buf), "SCR_Have_restart")
    return buf.value.decode() if flag.value else None


def start_restart():
    """Open the restart phase; returns the checkpoint's name."""
    buf = ctypes.create_string_buffer(_MAX_FILENAME)
    _check(_lib.SCR_Start_restart(buf), "SCR_Start_restart")
    return buf.value.decode()


def complete_restart(valid):
    """Close the restart phase; True if every process read its files successfully."""
    return _lib.SCR_Complete_restart(int(bool(valid))) == _SUCCESS


def need_checkpoint():
    """True if SCR's settings say a checkpoint should be taken now."""
    return _flag(_lib.SCR_Need_checkpoint, "SCR_Need_checkpoint")


def start_output(name, flags):
    """Open an output phase for dataset `name` (None: SCR names it) with FLAG_* `flags`."""
    _check(_lib.SCR_Start_output(None if name is None else name.encode(), int(flags)), "SCR_Start_output")


def complete_output(valid):
    """Close the output phase; True if every process wrote its files successfully."""
    return _lib.SCR_Complete_output(int(bool(valid))) == _SUCCESS


def should_exit():
    """True if the application should stop now (scr_halt, the allocation's end)."""
    return _flag(_lib.SCR_Should_exit, "SCR_Should_exit")


def current(name):
    """Tell SCR which checkpoint the application restarted from (without the restart API)."""
    _check(_lib.SCR_Current(name.encode()), "SCR_Current")


def delete(name):
    """Delete dataset `name`'s files and forget it."""
    _check(_lib.SCR_Delete(name.encode()), "SCR_Delete")


def drop(name):
    """Forget dataset `name`, keeping its files."""
    _check(_lib.SCR_Drop(name.encode()), "SCR_Drop")
