//! The SCR 3 C API (`scr.h`): each function converts its arguments, calls one runtime
//! function, prints the error if any, and maps the result to `SCR_SUCCESS` (0) or failure
//! (1). No panic crosses into C: a panic becomes a failure return with a message.
//!
//! `SCR_Configf` is C-variadic, which stable Rust cannot define: the exported symbol is a
//! naked jump into `scr_configf_impl` (`csrc/configf.c`), which formats the string and calls
//! `SCR_Config`; the jump leaves the caller's registers and stack exactly as the C caller set
//! them, so the variadic arguments arrive intact.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::config::Reply;
use crate::error::{Error, Result};
use crate::runtime::{self, FLAG_CHECKPOINT};
use crate::scr_error;

/// `SCR_SUCCESS` in `scr.h`: what every `SCR_*` call returns when it succeeded.
pub const SCR_SUCCESS: c_int = 0;
/// `SCR_FAILURE` in `scr.h`: the call failed (the error is printed, naming the call).
pub const SCR_FAILURE: c_int = 1;

/// Print an error once: a collective error on rank 0 only, anything else where it happened
/// (a pending one as a warning).
fn report(e: &Error) {
    match e {
        Error::Collective(_) => {
            if runtime::world_rank().unwrap_or(0) == 0 {
                scr_error!("{e}");
            }
        }
        Error::Pending(_) => crate::scr_warn!("{e}"),
        _ => scr_error!("{e}"),
    }
}

/// Run `f` behind a panic guard; errors are reported and become `SCR_FAILURE`. Once
/// `SCR_Init` found SCR disabled (`SCR_ENABLE=0`) nothing runs and every call fails quietly,
/// as in SCR 3.
fn guard<T>(call: &str, f: impl FnOnce() -> Result<T>) -> Option<T> {
    if runtime::disabled() {
        return None;
    }
    // In libscr_preload.so the hooks pass through while the library works (see `reentry`).
    let _inside = crate::reentry::Inside::enter();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            report(&e);
            None
        }
        Err(_) => {
            scr_error!("{call}: internal error (panic); see the message above");
            None
        }
    }
}

fn code(ok: Option<()>) -> c_int {
    if ok.is_some() {
        SCR_SUCCESS
    } else {
        SCR_FAILURE
    }
}

/// Borrow a C string argument.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string valid for the call.
unsafe fn arg<'a>(call: &'static str, what: &str, p: *const c_char) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::usage(call, format!("{what} is NULL")));
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| Error::usage(call, format!("{what} is not valid UTF-8")))
}

/// Copy `s` into a caller buffer of `SCR_MAX_FILENAME` bytes, NUL-terminated.
///
/// # Safety
/// `dst` must be NULL or point to at least `SCR_MAX_FILENAME` writable bytes.
unsafe fn put(call: &'static str, dst: *mut c_char, s: &str) -> Result<()> {
    if dst.is_null() {
        return Ok(());
    }
    let bytes = s.as_bytes();
    if bytes.len() >= crate::MAX_FILENAME {
        return Err(Error::usage(
            call,
            format!("result is longer than SCR_MAX_FILENAME ({} bytes): {s}", crate::MAX_FILENAME),
        ));
    }
    // SAFETY: the buffer holds SCR_MAX_FILENAME bytes and we write len+1 <= that.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len());
        *dst.add(bytes.len()) = 0;
    }
    Ok(())
}

/// # Safety
/// `flag` must be NULL or valid for writes.
unsafe fn put_flag(call: &'static str, flag: *mut c_int, v: bool) -> Result<()> {
    if flag.is_null() {
        return Err(Error::usage(call, "flag is NULL"));
    }
    // SAFETY: non-null per the check; the caller passes a pointer to an int.
    unsafe { *flag = v as c_int };
    Ok(())
}

/// SCR disabled (`SCR_ENABLE=0`): a flag query answers 0 (and the call fails), as in SCR 3.
///
/// # Safety
/// `flag` must be NULL or valid for writes.
unsafe fn say_no_when_disabled(flag: *mut c_int) {
    if runtime::disabled() && !flag.is_null() {
        // SAFETY: non-null per the check; the caller passes a pointer to an int.
        unsafe { *flag = 0 };
    }
}

/// `SCR_Init`: read the configuration, set up the job's directories, rebuild or fetch the
/// latest checkpoint for a restart; collective. In transparent mode the preload did it in
/// `MPI_Init`.
#[no_mangle]
pub extern "C" fn SCR_Init() -> c_int {
    if runtime::mode() == Some(runtime::Mode::Transparent) {
        // transparent mode: the preload ran SCR_Init inside MPI_Init already
        return SCR_SUCCESS;
    }
    // SCR_ENABLE=0: SCR_FAILURE, and SCR stays off (see `guard`)
    code(guard("SCR_Init", runtime::init).filter(|&on| on).map(|_| ()))
}

/// `SCR_Finalize`: finish the flush of the latest checkpoint or output, record why the job
/// stops and stop the background work; collective. In transparent mode `MPI_Finalize` does it.
#[no_mangle]
pub extern "C" fn SCR_Finalize() -> c_int {
    if runtime::mode() == Some(runtime::Mode::Transparent) {
        // transparent mode: SCR_Finalize runs inside MPI_Finalize
        return SCR_SUCCESS;
    }
    code(guard("SCR_Finalize", runtime::finalize))
}

/// `SCR_Config` behind the guard: `None` on failure (reported), else what it did.
///
/// # Safety
/// `config` must be NULL or a NUL-terminated string.
unsafe fn config_call(call: &'static str, config: *const c_char) -> Option<Reply> {
    guard(call, || {
        // SAFETY: per this function's contract.
        let text = unsafe { arg(call, "config", config) }?;
        runtime::config(text)
    })
}

/// A `malloc`ed copy of `v` the caller frees with `free()` (NULL if memory is exhausted).
fn malloc_str(v: &str) -> *mut c_char {
    // SAFETY: malloc of len+1 bytes, then a copy of len bytes and the NUL into them.
    unsafe {
        let p = libc::malloc(v.len() + 1) as *mut c_char;
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(v.as_ptr(), p as *mut u8, v.len());
            *p.add(v.len()) = 0;
        }
        p
    }
}

/// # Safety
/// `config` must be a NUL-terminated string. A returned string is `malloc`ed; the caller
/// frees it.
#[no_mangle]
pub unsafe extern "C" fn SCR_Config(config: *const c_char) -> *const c_char {
    // SAFETY: per this function's contract.
    match unsafe { config_call("SCR_Config", config) }.and_then(Reply::value) {
        Some(v) => malloc_str(&v),
        None => std::ptr::null(),
    }
}

/// `int scr_rs_config(const char* config, char** value)`: `SCR_Config` with a return code, for
/// the Fortran and Python bindings, which must tell a failed call from a parameter that is not
/// set (`SCR_Config` returns NULL for both) and a query from a setting. On `SCR_SUCCESS`,
/// `*value` is NULL after a set or unset, and after a query a `malloc`ed string the caller frees:
/// the value, or `""` when the parameter is not set (a set value is never empty).
///
/// # Safety
/// `config` must be a NUL-terminated string, `value` NULL or valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn scr_rs_config(config: *const c_char, value: *mut *mut c_char) -> c_int {
    // SAFETY: per this function's contract.
    let r = unsafe { config_call("SCR_Config", config) };
    let out = match &r {
        Some(Reply::Query(v)) => {
            let v = v.as_deref().unwrap_or("");
            let p = malloc_str(v);
            if p.is_null() {
                scr_error!("SCR_Config: cannot allocate {} bytes for the value", v.len() + 1);
                return SCR_FAILURE;
            }
            p
        }
        _ => std::ptr::null_mut(),
    };
    if !value.is_null() {
        // SAFETY: non-null, and valid for a pointer write per the contract.
        unsafe { *value = out };
    } else if !out.is_null() {
        // SAFETY: allocated above with malloc and not handed out.
        unsafe { libc::free(out as *mut libc::c_void) };
    }
    code(r.map(|_| ()))
}

/// `void scr_rs_error(const char* msg)`: print an error of the Fortran bindings the way the
/// library prints its own (severity, rank and node in front).
///
/// # Safety
/// `msg` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn scr_rs_error(msg: *const c_char) {
    if !msg.is_null() {
        // SAFETY: non-null and NUL-terminated per the contract.
        let text = unsafe { CStr::from_ptr(msg) };
        let _ = catch_unwind(|| scr_error!("{}", text.to_string_lossy()));
    }
}

extern "C" {
    fn scr_configf_impl(format: *const c_char, ...) -> *const c_char;
}

/// `const char* SCR_Configf(const char* format, ...)`: a tail jump into the C formatter.
///
/// # Safety
/// As `printf`: the arguments must match `format`.
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn SCR_Configf(format: *const c_char) -> *const c_char {
    #[cfg(target_arch = "x86_64")]
    core::arch::naked_asm!("jmp {}", sym scr_configf_impl);
    #[cfg(target_arch = "aarch64")]
    core::arch::naked_asm!("b {}", sym scr_configf_impl);
}

/// Called by the C formatter when it cannot allocate the formatted string.
#[no_mangle]
pub extern "C" fn scr_configf_report_truncated(needed: c_int) {
    scr_error!("SCR_Configf: cannot allocate {needed} bytes for the formatted string");
}

/// # Safety
/// `flag` must point to an int.
#[no_mangle]
pub unsafe extern "C" fn SCR_Need_checkpoint(flag: *mut c_int) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { say_no_when_disabled(flag) };
    code(guard("SCR_Need_checkpoint", || {
        let v = runtime::need_checkpoint()?;
        // SAFETY: per this function's contract.
        unsafe { put_flag("SCR_Need_checkpoint", flag, v) }
    }))
}

/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn SCR_Start_output(name: *const c_char, flags: c_int) -> c_int {
    code(guard("SCR_Start_output", || {
        // SAFETY: per this function's contract.
        let name = if name.is_null() { None } else { Some(unsafe { arg("SCR_Start_output", "name", name) }?) };
        runtime::start_output(name, flags)
    }))
}

/// A route call: `f` maps the name to a path, which is copied into `file`.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string, `file` NULL or a buffer of
/// `SCR_MAX_FILENAME` bytes.
unsafe fn route_into(
    call: &'static str,
    name: *const c_char,
    file: *mut c_char,
    f: impl FnOnce(&str) -> Result<std::path::PathBuf>,
) -> c_int {
    if runtime::disabled() {
        // SCR disabled (SCR_ENABLE=0): the file is the name itself, as SCR 3 routes outside
        // an output phase, so the application writes and reads where it says
        let _inside = crate::reentry::Inside::enter();
        // SAFETY: per this function's contract.
        let r = catch_unwind(AssertUnwindSafe(|| unsafe {
            let n = arg(call, "name", name)?;
            if file.is_null() || n.is_empty() {
                return Err(Error::usage(call, "name is empty or file buffer is NULL"));
            }
            put(call, file, n)
        }));
        return code(r.ok().and_then(|r| r.map_err(|e| report(&e)).ok()));
    }
    code(guard(call, || {
        // SAFETY: per this function's contract.
        let n = unsafe { arg(call, "name", name) }?;
        if file.is_null() {
            return Err(Error::usage(call, "file buffer is NULL"));
        }
        let routed = f(n)?;
        let routed = routed
            .to_str()
            .ok_or_else(|| Error::usage(call, format!("{} is not valid UTF-8", routed.display())))?
            .to_string();
        // SAFETY: per this function's contract.
        unsafe { put(call, file, &routed) }
    }))
}

/// # Safety
/// `name` must be a NUL-terminated string, `file` a buffer of `SCR_MAX_FILENAME` bytes.
#[no_mangle]
pub unsafe extern "C" fn SCR_Route_file(name: *const c_char, file: *mut c_char) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { route_into("SCR_Route_file", name, file, runtime::route_file) }
}

/// `int SCR_Route_shared_file(const char* name, char* file)`: declare `name` a file several
/// ranks write in this output phase; `file` receives the path every writer writes.
///
/// # Safety
/// `name` must be a NUL-terminated string, `file` a buffer of `SCR_MAX_FILENAME` bytes.
#[no_mangle]
pub unsafe extern "C" fn SCR_Route_shared_file(name: *const c_char, file: *mut c_char) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { route_into("SCR_Route_shared_file", name, file, runtime::route_shared_file) }
}

/// Both the call's failure and an invalid dataset return failure, as in SCR.
fn completion(r: Option<bool>) -> c_int {
    if r == Some(true) {
        SCR_SUCCESS
    } else {
        SCR_FAILURE
    }
}

/// `SCR_Complete_output`: close the phase `SCR_Start_output` opened; `valid` is 0 when this
/// rank's files are bad. Collective: returns `SCR_SUCCESS` only when the dataset is valid on
/// every rank (and then protected and, as configured, flushed).
#[no_mangle]
pub extern "C" fn SCR_Complete_output(valid: c_int) -> c_int {
    completion(guard("SCR_Complete_output", || runtime::complete_output(valid != 0)))
}

/// `SCR_Start_checkpoint` (SCR 1.x): `SCR_Start_output` of an unnamed checkpoint.
#[no_mangle]
pub extern "C" fn SCR_Start_checkpoint() -> c_int {
    code(guard("SCR_Start_checkpoint", || runtime::start_output(None, FLAG_CHECKPOINT)))
}

/// `SCR_Complete_checkpoint` (SCR 1.x): `SCR_Complete_output` of the checkpoint it started.
#[no_mangle]
pub extern "C" fn SCR_Complete_checkpoint(valid: c_int) -> c_int {
    completion(guard("SCR_Complete_checkpoint", || runtime::complete_output(valid != 0)))
}

/// # Safety
/// `flag` must point to an int; `name` must be NULL or a buffer of `SCR_MAX_FILENAME` bytes.
#[no_mangle]
pub unsafe extern "C" fn SCR_Have_restart(flag: *mut c_int, name: *mut c_char) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { say_no_when_disabled(flag) };
    code(guard("SCR_Have_restart", || {
        let r = runtime::have_restart()?;
        // SAFETY: per this function's contract.
        unsafe {
            put_flag("SCR_Have_restart", flag, r.is_some())?;
            if let Some(n) = &r {
                put("SCR_Have_restart", name, n)?;
            }
        }
        Ok(())
    }))
}

/// # Safety
/// `name` must be NULL or a buffer of `SCR_MAX_FILENAME` bytes.
#[no_mangle]
pub unsafe extern "C" fn SCR_Start_restart(name: *mut c_char) -> c_int {
    code(guard("SCR_Start_restart", || {
        let n = runtime::start_restart()?;
        // SAFETY: per this function's contract.
        unsafe { put("SCR_Start_restart", name, &n) }
    }))
}

/// # Safety
/// `ranks` and `nfiles` must point to ints.
#[no_mangle]
pub unsafe extern "C" fn SCR_Restart_info(ranks: *mut c_int, nfiles: *mut c_int) -> c_int {
    const CALL: &str = "SCR_Restart_info";
    code(guard(CALL, || {
        if ranks.is_null() || nfiles.is_null() {
            return Err(Error::usage(CALL, "ranks or nfiles is NULL"));
        }
        let (writers, files) = runtime::restart_info()?;
        let files =
            c_int::try_from(files).map_err(|_| Error::usage(CALL, format!("{files} files do not fit an int")))?;
        // SAFETY: both non-null and pointing to ints per this function's contract.
        unsafe {
            *ranks = writers as c_int;
            *nfiles = files;
        }
        Ok(())
    }))
}

/// # Safety
/// `name` must be a buffer of `SCR_MAX_FILENAME` bytes, `writer` NULL or a pointer to an int.
#[no_mangle]
pub unsafe extern "C" fn SCR_Restart_file(i: c_int, name: *mut c_char, writer: *mut c_int) -> c_int {
    const CALL: &str = "SCR_Restart_file";
    code(guard(CALL, || {
        if name.is_null() {
            return Err(Error::usage(CALL, "name buffer is NULL"));
        }
        let (path, w) = runtime::restart_file(i as i64)?;
        let path = path
            .to_str()
            .ok_or_else(|| Error::usage(CALL, format!("{} is not valid UTF-8", path.display())))?
            .to_string();
        // SAFETY: per this function's contract.
        unsafe {
            put(CALL, name, &path)?;
            if !writer.is_null() {
                *writer = w;
            }
        }
        Ok(())
    }))
}

/// `SCR_Complete_restart`: end the restart `SCR_Start_restart` began; `valid` is 0 when this
/// rank could not read its files. Collective: `SCR_SUCCESS` when every rank read its files;
/// otherwise `SCR_FAILURE`, and `SCR_Have_restart` says what to load next.
#[no_mangle]
pub extern "C" fn SCR_Complete_restart(valid: c_int) -> c_int {
    completion(guard("SCR_Complete_restart", || runtime::complete_restart(valid != 0)))
}

static VERSION_C: &CStr =
    match CStr::from_bytes_with_nul(concat!("scr-rs ", env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("version string has no interior NUL"),
    };

/// `SCR_Get_version`: the library's version string ([`crate::VERSION`]), static and
/// NUL-terminated.
#[no_mangle]
pub extern "C" fn SCR_Get_version() -> *const c_char {
    VERSION_C.as_ptr()
}

/// # Safety
/// `flag` must point to an int.
#[no_mangle]
pub unsafe extern "C" fn SCR_Should_exit(flag: *mut c_int) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { say_no_when_disabled(flag) };
    code(guard("SCR_Should_exit", || {
        let v = runtime::should_exit()?;
        // SAFETY: per this function's contract.
        unsafe { put_flag("SCR_Should_exit", flag, v) }
    }))
}

macro_rules! by_name {
    ($cname:ident, $call:literal, $f:path) => {
        /// # Safety
        /// `name` must be a NUL-terminated string.
        #[no_mangle]
        pub unsafe extern "C" fn $cname(name: *const c_char) -> c_int {
            code(guard($call, || {
                // SAFETY: per this function's contract.
                let n = unsafe { arg($call, "name", name) }?;
                $f(n)
            }))
        }
    };
}

by_name!(SCR_Current, "SCR_Current", runtime::current);
by_name!(SCR_Delete, "SCR_Delete", runtime::delete);
by_name!(SCR_Drop, "SCR_Drop", runtime::drop_entry);
