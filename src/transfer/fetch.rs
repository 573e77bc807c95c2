//! Fetch: bring a checkpoint from the prefix into cache (or, with `SCR_FETCH_BYPASS`, check
//! it in place), verifying every file's size and, when recorded, its CRC32. Rank 0 reads the
//! dataset's `summary.scr` and `rank2file.scr` and scatters each rank its file list; at most
//! `SCR_FETCH_WIDTH` ranks read at once. A failure anywhere fails the fetch on every rank and
//! removes what was copied. The copies keep the prefix files' mode and times, and files the
//! flush recorded as hard links of another (and still linked in the prefix) are linked again.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use super::copy::{copy_verified, identity, try_link, FileId};
use super::{Ctx, Reported, TransferError};
use crate::error::{Error, Result};
use crate::scr_debug;
use crate::state::dataset::DatasetDesc;
use crate::state::filemap::FileMeta;
use crate::state::summary::{PrefixFile, Rank2File, Summary};

/// Fetch dataset `id` into the cache directory `dir` (or check it in place if `bypass`).
/// Returns the dataset descriptor and this rank's files.
pub fn fetch(ctx: &Ctx, id: u64, dir: &Path, bypass: bool) -> Result<(DatasetDesc, Vec<FileMeta>)> {
    let t0 = Instant::now();
    let size = ctx.world.size();
    let plan: Option<std::result::Result<(DatasetDesc, Rank2File), TransferError>> =
        (ctx.world.rank() == 0).then(|| {
            let summary = Summary::load(&ctx.layout.summary(id))?;
            let summary = summary.ok_or_else(|| TransferError::Missing { path: ctx.layout.summary(id) })?;
            let r2f = Rank2File::load(&ctx.layout.rank2file(id))?;
            let r2f = r2f.ok_or_else(|| TransferError::Missing { path: ctx.layout.rank2file(id) })?;
            if r2f.ranks != size as u32 {
                return Err(TransferError::Ranks { written: r2f.ranks, ranks: size });
            }
            Ok((summary.desc, r2f))
        });
    let head: std::result::Result<DatasetDesc, Reported> = ctx.world.bcast(
        0,
        &plan
            .as_ref()
            .map(|p| p.as_ref().map(|(d, _)| d.clone()).map_err(Reported::of))
            .unwrap_or(Err(Reported::of(""))),
    )?;
    let desc = head.map_err(|e| Error::Collective(format!("fetch of dataset {id}: {e}")))?;
    let lists: Option<Vec<Vec<PrefixFile>>> = plan.map(|p| {
        let (_, r2f) = p.expect("checked by the broadcast");
        (0..size as u32).map(|r| r2f.files.get(&r).cloned().unwrap_or_default()).collect()
    });
    let mine: Vec<PrefixFile> = ctx.world.scatter(0, lists)?;

    let local = ctx.in_waves(ctx.settings.fetch_width, || {
        // rel -> (its place in the result, the identity of its prefix file) of files fetched;
        // identities are looked up only where a recorded link needs them
        let targets: std::collections::HashSet<&Path> = mine.iter().filter_map(|f| f.link.as_deref()).collect();
        let mut fetched: HashMap<&Path, (usize, Option<FileId>)> = HashMap::new();
        let mut out: Vec<FileMeta> = Vec::with_capacity(mine.len());
        for f in &mine {
            let src = ctx.layout.prefix.below(&f.rel)?;
            if bypass {
                let md = std::fs::metadata(&src).map_err(|e| Error::io("stat", &src, e))?;
                if md.len() != f.size {
                    return Err(Error::Integrity {
                        path: src,
                        why: format!("size is {} bytes, {} were recorded", md.len(), f.size),
                    });
                }
                out.push(FileMeta { rel: f.rel.clone(), path: src, size: f.size, crc: f.crc, complete: true });
                continue;
            }
            let dst = dir.join(&f.rel);
            let id = (f.link.is_some() || targets.contains(f.rel.as_path())).then(|| identity(&src)).flatten();
            // a hard link recorded at the flush, still one in the prefix, of the same bytes:
            // link the cached copy
            let first = f.link.as_deref().and_then(|l| fetched.get(l)).filter(|(_, i)| i.is_some() && *i == id);
            let first =
                first.map(|&(i, _)| &out[i]).filter(|of| of.size == f.size && f.crc.is_none_or(|c| of.crc == Some(c)));
            if let Some(of) = first.filter(|of| try_link(&of.path, &dst, true)) {
                let meta = FileMeta { rel: f.rel.clone(), path: dst, size: f.size, crc: of.crc, complete: true };
                fetched.insert(&f.rel, (out.len(), id));
                out.push(meta);
                continue;
            }
            let c = copy_verified(&src, &dst, Some(f.size), f.crc, ctx.settings.file_buf_size, true)?;
            scr_debug!(
                2,
                "fetched {} -> {} ({} bytes, crc32 verified: {})",
                src.display(),
                dst.display(),
                c.size,
                f.crc.is_some()
            );
            fetched.insert(&f.rel, (out.len(), id));
            out.push(FileMeta { rel: f.rel.clone(), path: dst, size: c.size, crc: Some(c.crc), complete: true });
        }
        Ok(out)
    });
    let err = local.as_ref().err().map(|e| e.to_string());
    if !ctx.world.all_true(err.is_none()) {
        if !bypass {
            let _ = crate::paths::remove_tree_if_exists(dir);
        }
        return Err(Error::Collective(ctx.summarize_failures(&format!("fetch of dataset {id} ({})", desc.name), err)));
    }
    let secs = ctx.world.max_f64(t0.elapsed().as_secs_f64());
    if ctx.world.rank() == 0 {
        scr_debug!(
            1,
            "fetched dataset {id} ({}): {} in {secs:.3} s, {:.1} MiB/s{}",
            desc.name,
            crate::log::bytes(desc.size),
            crate::log::mib_per_sec(desc.size, secs),
            if bypass { " (checked in place, SCR_FETCH_BYPASS)" } else { "" }
        );
    }
    Ok((desc, local.expect("checked above")))
}
