//! Redundancy schemes applied to a cached dataset, and the check a restart runs to decide
//! whether a cached dataset is usable.
//!
//! This build implements SINGLE: each file lives only in its writer's cache, so a dataset is
//! usable exactly when every rank still holds every file it wrote, with the recorded size
//! (and, with `SCR_CRC_ON_COPY=1`, the recorded CRC32). PARTNER, XOR and RS plug in here with an
//! encoder (applied in `SCR_Complete_output`) and a rebuild (run in `SCR_Init`).

use crate::desc::Scheme;
use crate::state::filemap::DatasetRecord;
use crate::transfer::copy::file_crc;

/// Apply the dataset's scheme after a valid `SCR_Complete_output` (SINGLE: nothing to add).
pub fn apply(rec: &DatasetRecord) -> Result<(), String> {
    match rec.reddesc.scheme {
        Scheme::Single => Ok(()),
        other => Err(format!("redundancy scheme {} is not available in this build", other.name())),
    }
}

/// Check that this rank holds its files of `rec` intact. `Err` lists what is wrong.
pub fn check_local(rec: &DatasetRecord, verify_crc: bool, buf_size: usize) -> Result<(), String> {
    if !rec.complete {
        return Err("the dataset was never completed (the run stopped during the output phase)".into());
    }
    let mut problems = Vec::new();
    for f in &rec.files {
        match std::fs::metadata(&f.path) {
            Err(e) => problems.push(format!("{}: {e}", f.path.display())),
            Ok(md) if md.len() != f.size => {
                problems.push(format!("{}: size is {} bytes, {} were written", f.path.display(), md.len(), f.size))
            }
            Ok(_) => {
                if let Some(crc) = f.crc.filter(|_| verify_crc) {
                    match file_crc(&f.path, buf_size) {
                        Ok(c) if c.crc != crc => problems.push(format!(
                            "{}: CRC32 is {:#010x}, {crc:#010x} was recorded",
                            f.path.display(),
                            c.crc
                        )),
                        Ok(_) => {}
                        Err(e) => problems.push(e.to_string()),
                    }
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}
