//! Writing a whole table at once: the DFA arrays (a few hundred thousand entries for 10,000
//! rules) through a memory mapping, the literal and identity sets with batch updates. One
//! system call per table instead of one per element keeps compile + apply of 10,000 rules
//! far under the 100 ms bar.

use std::os::fd::{AsFd, AsRawFd};

use super::loader::LoadError;
use super::maps::{Bulk, map_err};

/// The bytes of a plain-data value (`aya::Pod`: `repr(C)`, no padding holes read).
fn aya_pod_bytes<V: aya::Pod>(v: &V) -> &[u8] {
    // SAFETY: `V: Pod` is plain data of `size_of::<V>()` bytes, valid for reads as bytes.
    unsafe { std::slice::from_raw_parts(std::ptr::from_ref(v).cast::<u8>(), size_of::<V>()) }
}

/// An index into a map sized from the same collection (map sizes are u32).
pub fn index(n: usize) -> u32 {
    u32::try_from(n).expect("map sizes are checked against u32 when the maps are created")
}

impl<V: aya::Pod> Bulk<'_, u32, V> {
    /// Writes `values` at indices `0..` of a `BPF_F_MMAPABLE` array through a shared
    /// mapping of the map: one copy, no system call per element. Elements are 8-byte
    /// aligned in the kernel's array (`round_up(value_size, 8)`), and the mapping shows
    /// that layout.
    pub fn write_all(&mut self, values: &[V]) -> Result<(), LoadError> {
        let name = self.name;
        let info = self.data.info().map_err(map_err(name))?;
        let elem = size_of::<V>().next_multiple_of(8);
        if info.value_size() as usize != size_of::<V>()
            || (info.max_entries() as usize) < values.len()
        {
            return Err(LoadError::Map {
                map: name,
                detail: format!(
                    "{} values of {} bytes do not fit {} entries of {} bytes",
                    values.len(),
                    size_of::<V>(),
                    info.max_entries(),
                    info.value_size()
                ),
            });
        }
        let len = (info.max_entries() as usize * elem).max(1);
        // SAFETY: a fresh shared mapping of the map's memory (the kernel checks that the
        // map is mmapable and that `len` fits it); nothing else in this process aliases it,
        // and the programs only read the array.
        let mut mem = unsafe {
            memmap2::MmapOptions::new()
                .len(len)
                .map_mut(self.data.fd().as_fd().as_raw_fd())
        }
        .map_err(|e| LoadError::Map {
            map: name,
            detail: format!("cannot map it: {e}"),
        })?;
        for (i, v) in values.iter().enumerate() {
            let bytes = aya_pod_bytes(v);
            mem[i * elem..i * elem + bytes.len()].copy_from_slice(bytes);
        }
        Ok(())
    }
}

impl<K: aya::Pod, V: aya::Pod> Bulk<'_, K, V> {
    /// Writes `keys[i] -> values[i]` with `BPF_MAP_UPDATE_BATCH` (kernel 5.6+): one system
    /// call per 64k elements instead of one per element.
    pub fn update(&mut self, keys: &[K], values: &[V]) -> Result<(), LoadError> {
        const CHUNK: usize = 1 << 16;
        assert_eq!(keys.len(), values.len());
        let fd = self.data.fd().as_fd();
        for (k, v) in keys.chunks(CHUNK).zip(values.chunks(CHUNK)) {
            // SAFETY: `k` and `v` hold `k.len()` keys and values of the map's types (K and
            // V: the handle table says so and `tests/bpf_object.rs` checks it).
            let r = unsafe {
                crate::sys::bpf_map_update_batch(
                    fd,
                    k.as_ptr().cast(),
                    v.as_ptr().cast(),
                    index(k.len()),
                )
            };
            if let Err((e, done)) = r {
                return Err(LoadError::Map {
                    map: self.name,
                    detail: format!(
                        "batch update failed after {done} of {} elements: {e}",
                        k.len()
                    ),
                });
            }
        }
        Ok(())
    }
}
