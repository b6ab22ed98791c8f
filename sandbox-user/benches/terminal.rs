//! The terminal filter's throughput (`cargo bench -p sandbox-user --bench terminal`): what
//! a command's output costs on its way through sandbox's pty (`runtime::pty::Filter`), for
//! plain text, text with colours (a compiler's or `ls --color`'s), and a full-screen
//! program's redraws. Prints the median of several runs in MB/s, beside a plain copy of the
//! same bytes.

use std::time::Instant;

use sandbox_user::runtime::pty::Filter;

fn inputs() -> Vec<(&'static str, Vec<u8>)> {
    let line = "src/main.rs:42:17: warning: unused variable `x` — consider `_x` (日本)\r\n";
    let plain: Vec<u8> = line.repeat(200_000).into_bytes();
    let coloured: Vec<u8> = "\x1b[1m\x1b[33mwarning\x1b[0m: unused variable \x1b[1m`x`\x1b[0m at \x1b[36msrc/main.rs\x1b[0m:42\r\n"
        .repeat(200_000)
        .into_bytes();
    let mut screen = Vec::new();
    for i in 0..20_000 {
        screen.extend_from_slice(
            format!(
                "\x1b[?25l\x1b[{};1H\x1b[38;5;{}m\x1b[48;2;30;30;30m row {i:>6} │ status ok \x1b[0m\x1b[K\x1b]0;editor {i}\x07\x1b[?25h",
                i % 50 + 1,
                i % 256
            )
            .as_bytes(),
        );
    }
    vec![
        ("plain text", plain),
        ("coloured text", coloured),
        ("full-screen redraws", screen),
    ]
}

fn main() {
    for (name, input) in inputs() {
        let mut filtered = Vec::new();
        let mut copied = Vec::new();
        let mut times = Vec::new();
        let mut copies = Vec::new();
        for _ in 0..7 {
            let t = Instant::now();
            let mut f = Filter::default();
            filtered.clear();
            for chunk in input.chunks(8192) {
                f.feed(chunk, &mut filtered);
            }
            times.push(t.elapsed().as_secs_f64());
            assert_eq!(f.dropped, 0, "{name}: nothing to drop");
            let t = Instant::now();
            copied.clear();
            for chunk in input.chunks(8192) {
                copied.extend_from_slice(chunk);
            }
            copies.push(t.elapsed().as_secs_f64());
        }
        assert_eq!(filtered, input, "{name}: passed unchanged");
        times.sort_by(f64::total_cmp);
        copies.sort_by(f64::total_cmp);
        let mb = input.len() as f64 / 1e6;
        println!(
            "{name:<22} {:>7.1} MB: filter {:>7.0} MB/s, copy {:>7.0} MB/s",
            mb,
            mb / times[3],
            mb / copies[3]
        );
    }
}
