//! Dataset management (user guide 2.5.6): `SCR_Current` (choose the checkpoint to restart
//! from), `SCR_Delete` (remove a dataset from cache and prefix) and `SCR_Drop` (forget a
//! dataset in the index, keeping its files).

use super::{Phase, Runtime};
use crate::error::{Error, Result};
use crate::state::index::Index;
use crate::transfer::flush::delete_from_prefix;

impl Runtime {
    /// The id of the newest dataset called `name`, in cache or in the index (collective).
    fn find_named(&self, name: &str) -> Result<Option<u64>> {
        let in_index = if self.rank0() { self.load_index().by_name(name).map(|e| e.desc.id as i64) } else { None };
        let in_index = self.world.bcast(0, &in_index)?.unwrap_or(-1);
        let cached = self.filemap.by_name(name).map(|r| r.desc.id as i64).unwrap_or(-1);
        let id = self.world.max_i64(cached.max(in_index));
        Ok((id >= 0).then_some(id as u64))
    }

    fn check_idle(&self, call: &'static str) -> Result<()> {
        if self.phase != Phase::Idle {
            return Err(self.phase_error(call, "between output and restart phases"));
        }
        Ok(())
    }

    pub(super) fn set_current(&mut self, name: &str) -> Result<()> {
        const CALL: &str = "SCR_Current";
        self.check_idle(CALL)?;
        let Some(id) = self.find_named(name)? else {
            return Err(Error::usage(CALL, format!("no checkpoint named {name:?} in cache or in the prefix index")));
        };
        let is_ckpt = self.filemap.datasets.get(&id).map(|r| r.desc.checkpoint);
        let is_ckpt = if self.rank0() {
            is_ckpt.or_else(|| self.load_index().datasets.get(&id).map(|e| e.desc.checkpoint)).unwrap_or(false)
        } else {
            false
        };
        if !self.world.bcast(0, &is_ckpt)? {
            return Err(Error::usage(CALL, format!("{name:?} is an output dataset, not a checkpoint")));
        }
        let marked = if self.rank0() {
            Index::update(&self.layout.index(), |ix| {
                if ix.datasets.contains_key(&id) {
                    ix.current = Some(name.to_string());
                }
            })
            .map_err(Error::from)
        } else {
            Ok(())
        };
        self.agree(CALL, marked)?;
        self.wanted = Some(name.to_string());
        self.drop_newer_than_named(name);
        if self.restart.as_ref().map(|r| r.name.as_str()) != Some(name) {
            self.load_checkpoint()?;
        }
        Ok(())
    }

    pub(super) fn delete(&mut self, name: &str) -> Result<()> {
        const CALL: &str = "SCR_Delete";
        self.check_idle(CALL)?;
        let Some(id) = self.find_named(name)? else {
            return Err(Error::usage(CALL, format!("no dataset named {name:?} in cache or in the prefix index")));
        };
        self.drop_cached(id);
        if self.restart.as_ref().map(|r| r.id) == Some(id) {
            self.restart = None;
        }
        let local = if self.rank0() && self.load_index().datasets.contains_key(&id) {
            delete_from_prefix(&self.layout, id)
        } else {
            Ok(())
        };
        self.agree(CALL, local)
    }

    pub(super) fn drop_entry(&mut self, name: &str) -> Result<()> {
        const CALL: &str = "SCR_Drop";
        self.check_idle(CALL)?;
        let local: Result<bool> = if self.rank0() {
            Index::update(&self.layout.index(), |ix| {
                let id = ix.by_name(name).map(|e| e.desc.id);
                if let Some(id) = id {
                    ix.datasets.remove(&id);
                    if ix.current.as_deref() == Some(name) {
                        ix.current = None;
                    }
                }
                id
            })
            .map_err(Error::from)
            .and_then(|id| match id {
                Some(id) => crate::state::recover::mark_dropped(&self.layout.index(), id, true)
                    .map(|_| true)
                    .map_err(|e| Error::io("mark as dropped", self.layout.prefix_dataset_dir(id), e)),
                None => Ok(false),
            })
        } else {
            Ok(true)
        };
        let found = self.agree(CALL, local)?;
        if !self.world.bcast(0, &found)? {
            return Err(Error::usage(CALL, format!("no dataset named {name:?} in the prefix index")));
        }
        Ok(())
    }
}
