//! The node board: the sync-point agreement of a run whose ranks all share one node, carried
//! by shared memory around the application's own world collective instead of a collective
//! of SCR's ([`super::sync`]).
//!
//! A world allreduce that cannot carry the agreement as extra elements (a floating-point sum,
//! whose bits must stay a plain run's) otherwise costs a separate small allreduce when its
//! agreement is not deferred (in quiet stretches, 1 in 8); on one node, where every collective
//! is a round of context switches, that was most of SCR's collectives in OpenFOAM's run. The
//! deferral is the same with the board: the agreements it leaves run here instead. Each rank
//! posts its flags in its slot of a file mapped by every rank of the node *before* it enters
//! the application's collective, and reads every rank's slot *after* the collective returns.
//! No rank can leave an allreduce (of at least one element) before every rank entered it, so
//! every rank's post is there, and every rank reads the same flags: the agreement costs a few
//! memory accesses.
//!
//! The board also carries news at the sync points that defer their agreement
//! ([`super::sync::defer_on_board`]): a rank whose files changed since the last agreement
//! marks the deferred point's number in a news slot before it enters the collective, every
//! rank looks at every rank's news slot after it returns, and if one is marked, all run the
//! agreement at the next sync point (after a barrier, right away). A quiet stretch then costs
//! each rank a load of its own flag and one of each rank's news slot (cache lines nobody
//! writes) per collective, and the deferral can last far longer without a checkpoint waiting
//! longer for its agreement.
//!
//! Each rank has two slots, used by agreement number parity: a rank writes agreement `e + 2`
//! only after it left the collective of `e + 1`, which no rank leaves before every rank entered
//! it, which each rank does after reading agreement `e`. A slot holds the agreement's number
//! (written last, with release order) and the flags; each rank's slots fill one cache line.
//! Only for runs on one node (the runtime says, [`crate::runtime::node_spans_world`]) and
//! applications that did not ask for `MPI_THREAD_MULTIPLE` (whose threads could enter world
//! collectives in different orders on different ranks); the file is made by rank 0 in the
//! pending area at start with a stamp of the run, and used only if every rank mapped it and
//! found that stamp.

use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sys::SharedWords;

/// Words per rank: two slots of (agreement number, flags) and two of news (the deferred sync
/// point's number), padded to 64 bytes.
const WORDS: usize = 8;

/// How long a rank waits for a slot that must already be there before it calls the run
/// broken (a rank that did not take the board path: a bug).
const STUCK: Duration = Duration::from_secs(10);

/// The name of the board's file in the pending area.
pub const FILE: &str = "board";

/// This rank's view of the board.
pub struct Board {
    words: SharedWords,
    ranks: usize,
    me: usize,
    /// Agreements posted by this rank (the same count on every rank).
    posted: AtomicU64,
}

impl Board {
    /// Make the board's file for `ranks` ranks (rank 0, before the others map it): zeroed,
    /// but for `stamp` (this run's, non-zero) in its first word.
    pub fn create(path: &Path, ranks: usize, stamp: u64) -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        f.set_len(((ranks + 1) * WORDS * 8) as u64)?;
        f.write_all(&stamp.to_ne_bytes())
    }

    /// Map the board's file as rank `me` of `ranks`; refused unless it carries this run's
    /// `stamp` (a rank that sees another file at the same path, in a mount namespace of its
    /// own, must not post where the others cannot read).
    pub fn map(path: &Path, ranks: usize, me: usize, stamp: u64) -> std::io::Result<Board> {
        use std::os::fd::AsFd;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        if f.metadata()?.len() < ((ranks + 1) * WORDS * 8) as u64 {
            return Err(std::io::Error::other(format!("{} is shorter than {ranks} slots", path.display())));
        }
        let words = SharedWords::map(f.as_fd(), (ranks + 1) * WORDS)?;
        if words.word(0).load(Ordering::Acquire) != stamp {
            return Err(std::io::Error::other(format!("{} is not this run's board", path.display())));
        }
        Ok(Board { words, ranks, me, posted: AtomicU64::new(0) })
    }

    /// Before the application's collective: post this rank's flags (bit i: flag i) for the
    /// next agreement; its number, for [`Board::collect`].
    pub fn post(&self, flags: u64) -> u64 {
        let e = self.posted.fetch_add(1, Ordering::Relaxed) + 1;
        let at = self.slot(self.me, e);
        self.words.word(at + 1).store(flags, Ordering::Relaxed);
        self.words.word(at).store(e, Ordering::Release);
        fence(Ordering::SeqCst);
        e
    }

    /// After the application's collective returned: every rank's flags of agreement `e`,
    /// or-ed (the same on every rank). `Err`: a slot is not there (some rank did not post:
    /// the run cannot go on safely).
    pub fn collect(&self, e: u64) -> Result<u64, usize> {
        self.collect_within(e, STUCK)
    }

    /// [`Board::collect`], giving up on a slot after `stuck`.
    fn collect_within(&self, e: u64, stuck: Duration) -> Result<u64, usize> {
        fence(Ordering::SeqCst);
        let mut all = 0;
        for r in 0..self.ranks {
            let at = self.slot(r, e);
            let number = self.words.word(at);
            let mut since: Option<Instant> = None;
            while number.load(Ordering::Acquire) != e {
                let t = *since.get_or_insert_with(Instant::now);
                if t.elapsed() > stuck {
                    return Err(r);
                }
                std::thread::yield_now();
            }
            all |= self.words.word(at + 1).load(Ordering::Relaxed);
        }
        Ok(all)
    }

    /// Before the application's collective of deferred sync point `e` (numbered alike on
    /// every rank, [`super::sync::defer_on_board`]): this rank has news.
    pub fn post_news(&self, e: u64) {
        self.words.word(self.news_slot(self.me, e)).store(e, Ordering::Release);
        fence(Ordering::SeqCst);
    }

    /// After that collective returned: whether any rank posted news for `e` (the same answer
    /// on every rank). A rank posts for `e + 2` only after it left the collective of `e + 1`,
    /// which no rank leaves before every rank read `e`'s news, so each slot (two per rank,
    /// by parity) holds `e` from the post until every rank read it. The collective's own
    /// messages order the post before this read, as they do [`Board::post`]'s; unlike
    /// [`Board::collect`], which waits for a slot, this reads once: a read that missed a post
    /// would make this rank alone defer the next sync point, and the others' agreement there
    /// would end the run ([`Board::collect`]'s stall), so the same ordering carries both.
    #[inline]
    pub fn news(&self, e: u64) -> bool {
        fence(Ordering::Acquire);
        (0..self.ranks).any(|r| self.words.word(self.news_slot(r, e)).load(Ordering::Relaxed) == e)
    }

    /// Rank `r`'s news slot for deferred sync point `e` (after its two agreement slots).
    fn news_slot(&self, r: usize, e: u64) -> usize {
        (r + 1) * WORDS + 4 + (e % 2) as usize
    }

    /// The first word of rank `r`'s slot for agreement `e`.
    fn slot(&self, r: usize, e: u64) -> usize {
        // (the first WORDS hold the run's stamp)
        (r + 1) * WORDS + (e % 2) as usize * 2
    }

    /// Agreements this rank posted (tests).
    #[cfg(test)]
    fn posted(&self) -> u64 {
        self.posted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_reads_every_rank_s_flags_of_each_agreement() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(FILE);
        Board::create(&p, 4, 77).unwrap();
        assert!(Board::map(&p, 4, 0, 78).is_err(), "another run's board is refused");
        let boards: Vec<Board> = (0..4).map(|r| Board::map(&p, 4, r, 77).unwrap()).collect();
        for round in 0..5u64 {
            let posted: Vec<u64> = boards
                .iter()
                .enumerate()
                .map(|(r, b)| b.post(u64::from((round + r as u64).is_multiple_of(3)) << r))
                .collect();
            let want = (0..4).filter(|r| (round + r).is_multiple_of(3)).fold(0, |a, r| a | 1 << r);
            for (b, e) in boards.iter().zip(posted) {
                assert_eq!(e, round + 1);
                assert_eq!(b.collect(e), Ok(want), "round {round}");
            }
        }
        assert_eq!(boards[0].posted(), 5);
    }

    #[test]
    fn news_is_read_alike_by_every_rank_and_only_for_its_point() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(FILE);
        Board::create(&p, 3, 9).unwrap();
        let boards: Vec<Board> = (0..3).map(|r| Board::map(&p, 3, r, 9).unwrap()).collect();
        // deferred points 1-6; rank 2 has news at 2, rank 0 at 5 and at 6
        for e in 1..=6u64 {
            if e == 2 {
                boards[2].post_news(e);
            }
            if e >= 5 {
                boards[0].post_news(e);
            }
            let want = [2, 5, 6].contains(&e);
            assert!(boards.iter().all(|b| b.news(e) == want), "point {e}");
        }
        // a rank that posts for the next point before another read this one's (it left the
        // collective, the others did not yet): the other slot, this point's news stands (a
        // post for the point after next cannot come before every rank read this one: it
        // follows the next point's collective, which needs every rank, so one process cannot
        // show that hazard; the slots' independence is what is checked here)
        boards[1].post_news(7);
        boards[1].post_news(8);
        assert!(boards.iter().all(|b| b.news(7) && b.news(8)));
        assert!(!boards[0].news(9) && !boards[0].news(10), "stale slots are not news");
        // an agreement's number is no news (other words of the rank's line)
        let q = d.path().join("other");
        Board::create(&q, 2, 4).unwrap();
        let other: Vec<Board> = (0..2).map(|r| Board::map(&q, 2, r, 4).unwrap()).collect();
        let (e0, e1) = (other[0].post(u64::MAX), other[1].post(u64::MAX));
        assert_eq!((e0, e1), (1, 1));
        assert!(!other[0].news(1) && !other[1].news(1));
        assert_eq!(other[0].collect(1), Ok(u64::MAX));
    }

    #[test]
    fn a_rank_that_did_not_post_is_named() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(FILE);
        Board::create(&p, 2, 5).unwrap();
        let a = Board::map(&p, 2, 0, 5).unwrap();
        assert!(Board::map(&p, 3, 0, 5).is_err(), "a board too small for the run is refused");
        let e = a.post(1);
        // (rank 1 never posts: the collect gives up, naming it)
        let t = Instant::now();
        assert_eq!(a.collect_within(e, Duration::from_millis(50)), Err(1));
        assert!(t.elapsed() >= Duration::from_millis(50));
    }
}
