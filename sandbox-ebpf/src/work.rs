//! A decision's working memory: the path being built, the walk's and scan's loop state, a
//! kept directory state and the record being sent (`maps::Scratch`).
//!
//! LSM programs run with migration disabled, not preemption disabled: on a preemptible
//! kernel (Debian's 6.x boot `preempt=full` capable kernels; 7.x preempts lazily) another
//! task's program can run on the same CPU while a decision is in the middle of its own.
//! Each CPU therefore has [`SLOTS`] slots, and a decision that needs memory takes one with
//! a compare-and-swap ([`sandbox_claim`]), which no other decision can then write into,
//! and gives it back when its program ends ([`Claim`], released by `scope::decide`, or
//! [`with_claim`] for the benchmark's programs). No slot free (that many decisions
//! preempted in their programs on one CPU): a path decision fails closed
//! (`reason::BUSY`), a record is counted as lost.
//!
//! A slot is held only while its task is inside a program: a task preempted there is
//! runnable and finishes the program when it runs again (signals, stops and the freezer
//! act at the return to user space). Confined tasks can hold slots on purpose (threads
//! of low priority preempted inside programs, on a busy CPU), which makes their own
//! sandbox's path decisions on that CPU fail closed: never an allow, and only for the
//! same run (each run loads its own maps; out-of-scope tasks take no slot).

use crate::kread;
use crate::maps::{SCRATCH, Scratch};

/// Slots per CPU (a power of two: an index is masked with `SLOTS - 1`). Each is about
/// 17 KiB (two path buffers), so 136 KiB per CPU per run. Eight, not four: under heavy
/// oversubscription (a build's jobs far beyond the CPUs, every one opening files in
/// scope) a few tasks preempted inside programs on one CPU at once is not unthinkable,
/// eight is.
pub const SLOTS: u32 = 8;
/// `Scratch::taken` of a free slot; any other value is a decision's.
const FREE: u64 = 0;
const TAKEN: u64 = 1;
/// No slot: not claimed yet, or none was free.
const NONE: u32 = u32::MAX;

/// A slot this decision holds. Handed to global functions as its index ([`Work::index`]),
/// which they turn back with [`Work::at`].
#[derive(Clone, Copy)]
pub struct Work(u32);

impl Work {
    /// The working memory of the slot.
    #[inline(always)]
    pub fn mem(self) -> Option<&'static mut Scratch> {
        let p = SCRATCH.get_ptr_mut(self.0 & (SLOTS - 1))?;
        // SAFETY: a per-CPU map value that this decision alone holds (see the module).
        Some(unsafe { &mut *p })
    }

    /// The slot's index, as a global function's argument.
    #[inline(always)]
    pub fn index(self) -> u32 {
        self.0
    }

    /// The slot whose index a caller holding it passed (a global function's argument, a
    /// loop callback's context). Only for an index that came from [`Claim::work`] of the
    /// running decision.
    #[inline(always)]
    pub(crate) fn at(index: u32) -> Self {
        Work(index & (SLOTS - 1))
    }
}

/// The hook's record of the slot its decision took, if any: a cell on the program's
/// stack, handed down by pointer (in `Scope`), read once more when the program ends.
#[derive(Clone, Copy)]
pub struct Claim(*mut u32);

impl Claim {
    /// The cell `scope::decide` keeps on its stack (`u32`, holding [`Claim::EMPTY`] at
    /// first).
    pub const EMPTY: u32 = NONE;

    #[inline(always)]
    pub fn new(cell: *mut u32) -> Self {
        Claim(cell)
    }

    /// The decision's slot: the one it took already, or a free one now. `None` when every
    /// slot of this CPU is held by a decision in flight.
    #[inline(always)]
    pub fn work(self) -> Option<Work> {
        // SAFETY: the cell is a live local of the running program (`scope::decide`).
        let held = unsafe { core::ptr::read_volatile(self.0) };
        if held != NONE {
            return Some(Work::at(held));
        }
        let i = sandbox_claim();
        if i >= SLOTS {
            return None;
        }
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(self.0, i) };
        Some(Work::at(i))
    }

    /// Gives the slot back, if one was taken. Called once, when the program ends.
    #[inline(always)]
    pub fn release(self) {
        // SAFETY: as in `work`.
        let held = unsafe { core::ptr::read_volatile(self.0) };
        if held != NONE {
            release(Work::at(held));
        }
    }
}

/// `f` with a claim of its own, given back after it (for programs without a scope: the
/// native benchmark's).
#[inline(always)]
pub fn with_claim<R>(f: impl FnOnce(Claim) -> R) -> R {
    let mut cell = Claim::EMPTY;
    let mem = Claim::new(&raw mut cell);
    let r = f(mem);
    mem.release();
    r
}

/// Takes a free slot of this CPU: its index, or `u32::MAX` when none is free. A global
/// function: its answer is a number the verifier does not know, so what follows a claim
/// is verified once, not once per slot.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_claim() -> u32 {
    let mut i = 0;
    while i < SLOTS {
        if let Some(p) = SCRATCH.get_ptr_mut(i) {
            // SAFETY: `taken` is an aligned u64 of a map value. The compare-and-swap is one
            // instruction: a preemption falls before or after it, never inside.
            if kread::compare_exchange(unsafe { &raw mut (*p).taken }, FREE, TAKEN) {
                return i;
            }
        }
        i += 1;
    }
    NONE
}

/// Frees a slot [`sandbox_claim`] gave, after the decision's last write into it: every
/// access to a per-CPU slot is on this CPU, in program order, and the compare-and-swap
/// (an `asm!` block) keeps the compiler from moving a write of the slot after it.
#[inline(always)]
fn release(w: Work) {
    if let Some(p) = SCRATCH.get_ptr_mut(w.0 & (SLOTS - 1)) {
        // SAFETY: as in `sandbox_claim`; only the holder writes `taken` while it is taken.
        kread::compare_exchange(unsafe { &raw mut (*p).taken }, TAKEN, FREE);
    }
}
