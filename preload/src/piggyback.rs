//! The sync-point flags carried by the application's own `MPI_Allreduce`: for a predefined
//! operation (SUM, MAX, MIN, PROD, LOR, BOR, LAND, BAND) on a predefined integer (at least
//! 32 bits) type, or MAX/MIN on a floating-point type, and a small buffer ([`MAX_BYTES`]),
//! the hook reduces
//! `count + 4` elements instead of `count`: the application's, then one per flag, encoded
//! so that the reduced value says whether any rank set it (SUM, MAX, LOR, BOR: 1 = set,
//! 0 = not; MIN, PROD, LAND, BAND: 0 = set, 1 = not). The application's elements are
//! reduced exactly as before and copied back: an element's result does not depend on its
//! neighbours, nor, for these operations, on the order the MPI library combines the ranks'
//! values in. Floating-point SUM and PROD are never carried: 4 more elements can change the
//! algorithm the library picks by message size (recursive doubling below a threshold, ring
//! or Rabenseifner above) and with it each element's summation order, hence its last bits;
//! they keep the separate agreement, which leaves the application's call untouched. Whether a call carries the flags depends only on its count, datatype and
//! operation, which MPI requires to match on every rank, so every rank decides alike.
//! Anything else (user operations, derived or 8/16-bit types, large buffers) is left to the
//! separate agreement.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use mpi::ffi::{MPI_Comm, MPI_Datatype, MPI_Op};
use scr::transparent::sync::Flags;

const MPI_SUCCESS: c_int = 0;

/// The largest application buffer that carries the flags (bytes): a copy this small costs
/// nothing beside the reduction, and small reductions are where a second one doubles the time.
pub const MAX_BYTES: usize = 512;
/// Room for the application's elements and the flags (8-byte aligned, on the stack).
const WORDS: usize = MAX_BYTES / 8 + 4;

/// `PMPI_Allreduce`.
pub type RealAllreduce =
    unsafe extern "C" fn(*const c_void, *mut c_void, c_int, MPI_Datatype, MPI_Op, MPI_Comm) -> c_int;

/// The arguments of one `MPI_Allreduce`.
#[derive(Clone, Copy)]
pub struct Allreduce {
    pub send: *const c_void,
    pub recv: *mut c_void,
    pub count: c_int,
    pub t: MPI_Datatype,
    pub op: MPI_Op,
    pub comm: MPI_Comm,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Int,
    Float,
}

/// A predefined type the flags can travel in: its kind and size (4 or 8 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Elem {
    kind: Kind,
    size: usize,
}

/// A call that carries the flags: its element type, byte count, and whether a set flag is
/// encoded as 0 (MIN, PROD, LAND, BAND).
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    elem: Elem,
    bytes: usize,
    zero_is_set: bool,
}

impl Plan {
    /// [`Plan::new`] for a caller on the application's one MPI thread at a time (not under
    /// `MPI_THREAD_MULTIPLE`, whose calls never carry the flags), with the last call's answer
    /// kept: a solver reduces the same count, type and operation over and over, and this is
    /// then a few loads and compares. MPI's contract orders such calls (one thread, or
    /// serialized by the application), so the relaxed loads see the last call's stores. The
    /// answer kept for a handle never goes stale: a predefined handle is never freed, and a
    /// handle that is not one (a derived type, a user operation) never carries the flags, so a
    /// handle freed and given out again can only stand for another that does not either.
    #[inline]
    pub fn serial(count: c_int, t: MPI_Datatype, op: MPI_Op) -> Option<Plan> {
        let (t_key, op_key) = (t.0 as usize, op.0 as usize);
        let kept = LAST.plan.load(Ordering::Relaxed);
        if kept != 0
            && LAST.t.load(Ordering::Relaxed) == t_key
            && LAST.op.load(Ordering::Relaxed) == op_key
            && LAST.count.load(Ordering::Relaxed) == count as i64
        {
            return Plan::unpack(kept);
        }
        Plan::learn(count, t, op)
    }

    /// [`Plan::serial`] when the last call's answer does not fit.
    #[inline(never)]
    fn learn(count: c_int, t: MPI_Datatype, op: MPI_Op) -> Option<Plan> {
        let (t_key, op_key) = (t.0 as usize, op.0 as usize);
        let plan = Plan::new(count, t, op);
        LAST.plan.store(0, Ordering::Relaxed);
        LAST.t.store(t_key, Ordering::Relaxed);
        LAST.op.store(op_key, Ordering::Relaxed);
        LAST.count.store(count as i64, Ordering::Relaxed);
        LAST.plan.store(Plan::pack(plan), Ordering::Relaxed);
        plan
    }

    /// `plan` as one non-zero word (bit 0: kept; bit 1: a plan; bit 2: `zero_is_set`; bit 3:
    /// float; bit 4: 8-byte elements; bits 8 and up: `bytes`).
    fn pack(plan: Option<Plan>) -> u64 {
        plan.map_or(1, |p| {
            3 | u64::from(p.zero_is_set) << 2
                | u64::from(p.elem.kind == Kind::Float) << 3
                | u64::from(p.elem.size == 8) << 4
                | (p.bytes as u64) << 8
        })
    }

    fn unpack(w: u64) -> Option<Plan> {
        (w & 2 != 0).then_some(Plan {
            elem: Elem {
                kind: if w & 8 != 0 { Kind::Float } else { Kind::Int },
                size: if w & 16 != 0 { 8 } else { 4 },
            },
            bytes: (w >> 8) as usize,
            zero_is_set: w & 4 != 0,
        })
    }

    /// Whether `count` elements of `t` reduced with `op` carry the flags.
    fn new(count: c_int, t: MPI_Datatype, op: MPI_Op) -> Option<Plan> {
        let count = usize::try_from(count).ok()?;
        // SAFETY: reading the predefined handle constants.
        let (sum, max, min, prod, lor, bor, land, band) = unsafe {
            use mpi::ffi::*;
            (RSMPI_SUM, RSMPI_MAX, RSMPI_MIN, RSMPI_PROD, RSMPI_LOR, RSMPI_BOR, RSMPI_LAND, RSMPI_BAND)
        };
        // ints_only: the result depends on the order of the ranks' values for floats
        let (zero_is_set, ints_only) = if op == sum {
            (false, true)
        } else if op == max {
            (false, false)
        } else if op == prod {
            (true, true)
        } else if op == min {
            (true, false)
        } else if op == lor || op == bor {
            (false, true)
        } else if op == land || op == band {
            (true, true)
        } else {
            return None;
        };
        let elem = classify(t)?;
        let bytes = count.checked_mul(elem.size)?;
        if bytes > MAX_BYTES || (ints_only && elem.kind != Kind::Int) {
            return None;
        }
        Some(Plan { elem, bytes, zero_is_set })
    }

    /// The application's allreduce `a` with the flags `mine` as extra elements (`real`: the
    /// next `PMPI_Allreduce`). `Err(rc)`: it failed.
    ///
    /// # Safety
    /// `a` holds the application's arguments: `send` (or `recv` for `MPI_IN_PLACE`) holds
    /// `count` elements, `recv` has room for them, as MPI requires.
    pub unsafe fn run(&self, real: RealAllreduce, a: &Allreduce, mine: Flags) -> Result<Flags, c_int> {
        let Allreduce { send, recv, count, t, op, comm } = *a;
        // (not zeroed: only the count + 4 elements written are read)
        let mut out = std::mem::MaybeUninit::<[u64; WORDS]>::uninit();
        let mut buf = std::mem::MaybeUninit::<[u64; WORDS]>::uninit();
        let b = buf.as_mut_ptr() as *mut u8;
        let from = if in_place(send) { recv as *const u8 } else { send as *const u8 };
        if self.bytes > 0 {
            // SAFETY: the application's buffer holds `bytes` (caller); ours has room.
            unsafe { std::ptr::copy_nonoverlapping(from, b, self.bytes) };
        }
        for (i, set) in mine.iter().enumerate() {
            // SAFETY: `bytes + 4 * size` <= WORDS * 8.
            let at = unsafe { std::slice::from_raw_parts_mut(b.add(self.bytes + i * self.elem.size), self.elem.size) };
            self.put(at, *set != self.zero_is_set);
        }
        // SAFETY: both buffers hold count + 4 elements of `t`.
        let rc =
            unsafe { real(buf.as_ptr() as *const c_void, out.as_mut_ptr() as *mut c_void, count + 4, t, op, comm) };
        if rc != MPI_SUCCESS {
            return Err(rc);
        }
        let o = out.as_ptr() as *const u8;
        if self.bytes > 0 {
            // SAFETY: `recv` has room for `bytes` (caller).
            unsafe { std::ptr::copy_nonoverlapping(o, recv as *mut u8, self.bytes) };
        }
        Ok(std::array::from_fn(|i| {
            // SAFETY: within `out`, as above.
            let at = unsafe { std::slice::from_raw_parts(o.add(self.bytes + i * self.elem.size), self.elem.size) };
            self.nonzero(at) != self.zero_is_set
        }))
    }

    fn put(&self, at: &mut [u8], one: bool) {
        let v = u8::from(one);
        match (self.elem.kind, self.elem.size) {
            (Kind::Int, 4) => at.copy_from_slice(&i32::from(v).to_ne_bytes()),
            (Kind::Int, _) => at.copy_from_slice(&i64::from(v).to_ne_bytes()),
            (Kind::Float, 4) => at.copy_from_slice(&f32::from(v).to_ne_bytes()),
            (Kind::Float, _) => at.copy_from_slice(&f64::from(v).to_ne_bytes()),
        }
    }

    fn nonzero(&self, at: &[u8]) -> bool {
        match (self.elem.kind, self.elem.size) {
            (Kind::Int, _) => at.iter().any(|b| *b != 0),
            (Kind::Float, 4) => f32::from_ne_bytes(at.try_into().unwrap_or_default()) != 0.0,
            (Kind::Float, _) => f64::from_ne_bytes(at.try_into().unwrap_or_default()) != 0.0,
        }
    }
}

/// `MPI_IN_PLACE` (Open MPI: 1, MPICH: -1; never a buffer address).
fn in_place(p: *const c_void) -> bool {
    p as usize == 1 || p as isize == -1
}

/// [`Plan::serial`]'s last call and its answer (`plan` 0: none yet).
struct Last {
    t: AtomicUsize,
    op: AtomicUsize,
    count: AtomicI64,
    plan: AtomicU64,
}

static LAST: Last =
    Last { t: AtomicUsize::new(0), op: AtomicUsize::new(0), count: AtomicI64::new(0), plan: AtomicU64::new(0) };

thread_local! {
    /// Datatypes already classified (handle, class; 0: empty). A predefined handle is never
    /// freed, so a handle that is not one cannot later become one: the cache never goes stale.
    static SEEN: Cell<[(usize, Option<Elem>); 8]> = const { Cell::new([(0, None); 8]) };
    static NEXT: Cell<usize> = const { Cell::new(0) };
}

/// The kind and size of a predefined type the flags can travel in.
fn classify(t: MPI_Datatype) -> Option<Elem> {
    let key = t.0 as usize;
    if let Ok(seen) = SEEN.try_with(|s| s.get()) {
        if let Some((_, e)) = seen.iter().find(|(k, _)| *k == key && key != 0) {
            return *e;
        }
    }
    let e = ask(t);
    let _ = SEEN.try_with(|s| {
        let mut v = s.get();
        let i = NEXT.with(|n| {
            let i = n.get();
            n.set((i + 1) % v.len());
            i
        });
        v[i] = (key, e);
        s.set(v);
    });
    e
}

/// Ask MPI: a named (predefined) type, by its name and size.
fn ask(t: MPI_Datatype) -> Option<Elem> {
    let (mut ni, mut na, mut nd, mut combiner) = (0, 0, 0, -1);
    // SAFETY: local queries on the application's datatype; an invalid handle makes them fail.
    if unsafe { mpi::ffi::MPI_Type_get_envelope(t, &mut ni, &mut na, &mut nd, &mut combiner) } != MPI_SUCCESS
        || combiner != mpi::ffi::MPI_COMBINER_NAMED as c_int
    {
        return None;
    }
    let mut name = [0 as c_char; mpi::ffi::MPI_MAX_OBJECT_NAME as usize + 1];
    let (mut len, mut size) = (0, 0);
    // SAFETY: as above; `name` has MPI_MAX_OBJECT_NAME characters.
    if unsafe { mpi::ffi::MPI_Type_get_name(t, name.as_mut_ptr(), &mut len) } != MPI_SUCCESS
        || unsafe { mpi::ffi::MPI_Type_size(t, &mut size) } != MPI_SUCCESS
    {
        return None;
    }
    // SAFETY: MPI wrote a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_bytes();
    let kind = match name {
        b"MPI_INT"
        | b"MPI_LONG"
        | b"MPI_LONG_LONG"
        | b"MPI_LONG_LONG_INT"
        | b"MPI_UNSIGNED"
        | b"MPI_UNSIGNED_LONG"
        | b"MPI_UNSIGNED_LONG_LONG"
        | b"MPI_INT32_T"
        | b"MPI_INT64_T"
        | b"MPI_UINT32_T"
        | b"MPI_UINT64_T"
        | b"MPI_AINT"
        | b"MPI_OFFSET"
        | b"MPI_COUNT"
        | b"MPI_INTEGER"
        | b"MPI_INTEGER4"
        | b"MPI_INTEGER8" => Kind::Int,
        b"MPI_FLOAT" | b"MPI_DOUBLE" | b"MPI_REAL" | b"MPI_REAL4" | b"MPI_REAL8" | b"MPI_DOUBLE_PRECISION" => {
            Kind::Float
        }
        _ => return None,
    };
    let size = usize::try_from(size).ok().filter(|s| *s == 4 || *s == 8)?;
    Some(Elem { kind, size })
}
