//! Persistent state: where things live ([`layout`]) and the metadata files that record them.
//! Every file here is written through [`crate::persist`] (atomic, self-checking).
//! Every path a record holds is relative to the directory it belongs to and is read through
//! [`crate::paths::RelPath`] (fields marked `crate::paths::rel_field`): a record naming an
//! absolute path or one with a `..` component does not load, as if damaged, because the
//! prefix may hold files someone else wrote.
//!
//! | file | where | written by | content |
//! |---|---|---|---|
//! | `filemap_<rank>.scrinfo` | control dir | each rank | that rank's cached datasets: descriptor, redundancy descriptor, files with size/CRC/completeness |
//! | `.filemap_<rank>.scrinfo.spare` | control dir | each rank | the filemap's content before last, over which the next save is written before the two trade places (`crate::persist::write_swapped`) |
//! | `flush.scr` | control dir | node leader | location of each cached dataset: CACHE, FLUSHING, PFS |
//! | `.flush.scr.spare` | control dir | node leader | the flush file's content before last (as the filemap's spare) |
//! | `index.scr` | `<prefix>/.scr` | rank 0, `scr_index` | datasets in the prefix: complete, flushed time, failed, fetch attempts, current marker |
//! | `halt.scr` | `<prefix>/.scr` | rank 0, `scr_halt` | halt conditions and exit reason |
//! | `summary.scr`, `rank2file.scr` | `<prefix>/.scr/scr.dataset.<id>` | rank 0 at flush, `scr_index --build` | dataset descriptor; each rank's files with size and CRC |
//! | `<rank>.scrfilemap` | `<prefix>/.scr/scr.dataset.<id>` | `scr_copy` (scavenge), `scr_index --build` | one rank's scavenged files and its redundancy file |
//! | `crc.<rank>.scr` | `<dataset cache dir>/.scr` | each rank's background checksum (SINGLE) | that rank's files with size and CRC32 |
//! | `run.scr` | `<prefix>/.scr` | `scr_run` | the run it launched: host, process, nodes, outcome |

pub(crate) mod crcs;
pub(crate) mod dataset;
pub mod filemap;
pub mod flushfile;
pub mod halt;
pub mod index;
pub(crate) mod joblock;
pub(crate) mod layout;
pub(crate) mod rankfile;
pub(crate) mod recover;
pub(crate) mod redinfo;
pub(crate) mod run;
pub(crate) mod summary;
