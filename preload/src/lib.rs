//! `libscr_preload.so`: transparent mode. This crate embeds the SCR core and exports the
//! whole SCR C API (the `#[no_mangle]` functions of `scr::capi` are linked in), so a
//! preloaded application may call `SCR_*` itself. The `MPI_Init`/`MPI_Finalize` and file
//! hooks arrive with the transparent-mode issue; until then, preloading this library
//! changes nothing in an application that does not call SCR.

pub use scr::capi;
