//! Identical denials the kernel counted instead of sending (`sandbox_common::AggSlot`),
//! matched to the record they repeat. Each CPU has one key at a time: the last
//! aggregatable record it sent (`EVENT_F_AGG_KEY`, identified by its `agg_key`). Counts
//! reach userspace two ways: a count record in the ring (`EVENT_F_REPEATS`, when the key
//! changes or its window ends), and a read of the CPU's slot for a flood that stopped
//! ([`Aggregates::sweep`]). Both carry the CPU's running total of counted denials, so
//! what was already written is never written again: every denial is a record, a count,
//! or counted as lost.

use std::collections::HashMap;

use sandbox_common::{AGG_WINDOW_NS, AggSlot, EVENT_F_AGG_KEY, EVENT_F_REPEATS};

use super::Event;

/// What to write for counted denials.
#[derive(Debug, Clone)]
pub enum Repeat {
    /// `count` more denials like `key`, the last at `last_ns` (`CLOCK_BOOTTIME`).
    Of {
        key: Box<Event>,
        count: u64,
        last_ns: u64,
    },
    /// Denials whose key record was not read (the drain's bound): counted as lost.
    Unknown { count: u64 },
}

#[derive(Debug, Default)]
struct Cpu {
    key: Option<Event>,
    /// The CPU's total of counted denials already written (as records or as lost).
    written: u64,
}

#[derive(Debug, Default)]
pub struct Aggregates {
    cpus: HashMap<u32, Cpu>,
}

impl Aggregates {
    /// Every record read from the ring passes here: keys are remembered; a count record
    /// gives what to write (`None`: nothing new, or not a count record).
    pub fn on_event(&mut self, e: &Event) -> Option<Repeat> {
        let h = &e.header;
        let cpu = self.cpus.entry(h.cpu).or_default();
        if h.flags & EVENT_F_REPEATS != 0 {
            let count = h.agg_total.saturating_sub(cpu.written.max(h.agg_base));
            cpu.written = cpu.written.max(h.agg_total);
            if count == 0 {
                return None;
            }
            return Some(match &cpu.key {
                Some(k) if k.header.agg_key == h.agg_key => Repeat::Of {
                    key: Box::new(k.clone()),
                    count,
                    last_ns: h.time_ns,
                },
                _ => Repeat::Unknown { count },
            });
        }
        if h.flags & EVENT_F_AGG_KEY != 0 {
            cpu.key = Some(e.clone());
            cpu.written = cpu.written.max(h.agg_base);
        }
        None
    }

    /// Counts still in the CPUs' slots (`slots[cpu]`). With `now_ns`, only of floods that
    /// stopped a window ago (one still going gets its count record from the kernel), and
    /// a slot whose key record has not been read yet is left for later. At the end
    /// (`None`: nothing more will come), all; counts whose key record was never read
    /// (the drain's bound; a dead run's, read by the next) are [`Repeat::Unknown`].
    pub fn sweep(&mut self, slots: &[AggSlot], now_ns: Option<u64>) -> Vec<Repeat> {
        let mut out = Vec::new();
        for (c, slot) in slots.iter().enumerate() {
            let Ok(c) = u32::try_from(c) else { break };
            let cpu = self.cpus.entry(c).or_default();
            let key = cpu
                .key
                .as_ref()
                .filter(|k| k.header.agg_key == slot.key_seq);
            if now_ns.is_some_and(|now| {
                key.is_none() || now.saturating_sub(slot.last_ns) < AGG_WINDOW_NS
            }) {
                continue;
            }
            let count = slot.suppressed.saturating_sub(cpu.written.max(slot.base));
            if count == 0 {
                continue;
            }
            cpu.written = slot.suppressed;
            out.push(match key {
                Some(k) => Repeat::Of {
                    key: Box::new(k.clone()),
                    count,
                    last_ns: slot.last_ns,
                },
                None => Repeat::Unknown { count },
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use sandbox_common::EventHeader;

    use super::*;
    use crate::audit::Hook;

    fn event(flags: u32, cpu: u32, base: u64, total: u64) -> Event {
        Event {
            header: EventHeader {
                hook: sandbox_common::hook::FILE_OPEN,
                flags,
                cpu,
                agg_base: base,
                agg_total: total,
                // One key per base in these tests.
                agg_key: base + 1,
                ..EventHeader::default()
            },
            hook: Hook::FileOpen,
            sb_path: Vec::new(),
            exe_path: Vec::new(),
        }
    }

    fn count(r: Option<Repeat>) -> Option<u64> {
        match r? {
            Repeat::Of { count, .. } => Some(count),
            Repeat::Unknown { .. } => None,
        }
    }

    fn slot(suppressed: u64, base: u64, last_ns: u64) -> AggSlot {
        AggSlot {
            suppressed,
            base,
            key_seq: base + 1,
            last_ns,
            valid: 1,
            ..AggSlot::default()
        }
    }

    /// Counted once, however the count arrives: the sweep of a stopped flood, then the
    /// kernel's count record for the same run (only what the sweep had not seen).
    #[test]
    fn every_count_is_written_once() {
        let mut a = Aggregates::default();
        assert!(a.on_event(&event(EVENT_F_AGG_KEY, 1, 10, 10)).is_none());
        // Still flooding: left to the kernel.
        assert!(
            a.sweep(&[slot(0, 0, 0), slot(15, 10, 5)], Some(6))
                .is_empty()
        );
        let swept = a.sweep(&[slot(0, 0, 0), slot(15, 10, 5)], Some(5 + AGG_WINDOW_NS));
        assert_eq!(swept.len(), 1);
        assert_eq!(count(swept.into_iter().next()), Some(5));
        // The flood went on meanwhile: the count record says 10 (20 - 10), of which the
        // sweep wrote 5.
        assert_eq!(
            count(a.on_event(&event(EVENT_F_REPEATS, 1, 10, 20))),
            Some(5)
        );
        // Nothing new at the end.
        assert!(a.sweep(&[slot(0, 0, 0), slot(20, 20, 9)], None).is_empty());
        // A new key on CPU 1, and CPU 0 keeps its own account.
        assert!(a.on_event(&event(EVENT_F_AGG_KEY, 1, 20, 20)).is_none());
        assert!(a.on_event(&event(EVENT_F_AGG_KEY, 0, 0, 0)).is_none());
        assert_eq!(count(a.on_event(&event(EVENT_F_REPEATS, 0, 0, 3))), Some(3));
        let end = a.sweep(&[slot(3, 0, 1), slot(27, 20, 1)], None);
        assert_eq!(end.len(), 1);
        assert_eq!(count(end.into_iter().next()), Some(7));
    }

    /// Two keys in a row with no repeat between share their base: the counts of the
    /// second are never put on the first (found by an attacker review).
    #[test]
    fn keys_with_the_same_base_stay_apart() {
        let mut a = Aggregates::default();
        let mut first = event(EVENT_F_AGG_KEY, 0, 10, 10);
        first.header.agg_key = 7;
        assert!(a.on_event(&first).is_none());
        // The second key (seq 8, same base) is still in the ring; its flood stopped.
        let second = AggSlot {
            suppressed: 15,
            base: 10,
            key_seq: 8,
            last_ns: 0,
            valid: 1,
            ..AggSlot::default()
        };
        assert!(a.sweep(&[second], Some(10 * AGG_WINDOW_NS)).is_empty());
        let mut key2 = event(EVENT_F_AGG_KEY, 0, 10, 10);
        key2.header.agg_key = 8;
        key2.header.ino = 2;
        assert!(a.on_event(&key2).is_none());
        let swept = a.sweep(&[second], Some(10 * AGG_WINDOW_NS));
        assert!(
            matches!(swept.as_slice(), [Repeat::Of { key, count: 5, .. }] if key.header.ino == 2)
        );
    }

    /// A count whose key record was never read is written as lost, not dropped; a slot
    /// whose key record may still be in the ring is left alone until the end.
    #[test]
    fn counts_without_their_record() {
        let mut a = Aggregates::default();
        assert!(matches!(
            a.on_event(&event(EVENT_F_REPEATS, 2, 40, 44)),
            Some(Repeat::Unknown { count: 4 })
        ));
        assert!(a.on_event(&event(EVENT_F_AGG_KEY, 2, 30, 30)).is_none());
        let slots = [slot(0, 0, 0), slot(0, 0, 0), slot(50, 44, 0)];
        assert!(a.sweep(&slots, Some(10 * AGG_WINDOW_NS)).is_empty());
        let end = a.sweep(&slots, None);
        assert!(matches!(end.as_slice(), [Repeat::Unknown { count: 6 }]));
    }
}
