//! What talks to the kernel's BPF side: the loader (programs, maps, the policy written
//! into them), kernel BTF (struct offsets), kernel symbols (the directory cache), and the
//! pins that outlive a run.

pub mod btf;
pub mod bulk;
pub mod dircache;
pub mod loader;
pub mod maps;
pub mod pins;
