//! Where a field (`files.deny[2]`) is written in the policy text, for errors found after
//! parsing (serde_yaml keeps no positions in values). Understands what policies are written
//! with: block mappings, block sequences (`- x`, also at the key's indentation) and flow
//! sequences (`[a, b]`) on the key's line. When a step cannot be followed, the position of
//! the deepest part found is returned (a key rather than its item), or nothing.

/// 1-based (line, column) of `field` in `text`.
pub fn locate(text: &str, field: &str) -> Option<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    // The block being searched: lines [from, to), whose keys are indented more than `parent`.
    let (mut from, mut to, mut parent) = (0usize, lines.len(), -1isize);
    let mut found = None;
    for seg in field.split('.') {
        let (key, index) = match seg.split_once('[') {
            Some((k, rest)) => (k, rest.strip_suffix(']')?.parse::<usize>().ok()),
            None => (seg, None),
        };
        let Some((line, indent, value_col)) = find_key(&lines, from, to, parent, key) else {
            return found;
        };
        found = Some((line + 1, indent + 1));
        let end = block_end(&lines, line + 1, to, indent as isize);
        match index {
            None => {
                if value_col.is_some() {
                    found = value_col.map(|c| (line + 1, c + 1));
                }
                (from, to, parent) = (line + 1, end, indent as isize);
            }
            Some(i) => {
                let rest = &lines[line][value_col.unwrap_or(lines[line].len())..];
                if rest.trim_start().starts_with('[') {
                    let start = value_col.unwrap_or(0) + (rest.len() - rest.trim_start().len());
                    return flow_item(lines[line], start, i)
                        .map(|c| (line + 1, c + 1))
                        .or(found);
                }
                // Block items: `- ` lines at the key's indentation or deeper.
                let end = block_end(&lines, line + 1, to, indent as isize - 1);
                let mut n = 0;
                let mut item_indent = None;
                for (l, text) in lines.iter().enumerate().take(end).skip(line + 1) {
                    let ind = indentation(text);
                    let t = text.trim_start();
                    if !t.starts_with('-') || t.starts_with("---") {
                        continue;
                    }
                    if *item_indent.get_or_insert(ind) != ind {
                        continue;
                    }
                    if n == i {
                        let after = t[1..].len() - t[1..].trim_start().len();
                        return Some((l + 1, ind + 1 + 1 + after));
                    }
                    n += 1;
                }
                return found;
            }
        }
    }
    found
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn blank(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty() || t.starts_with('#')
}

/// The first line at or after `from` (before `to`) that is not blank and is indented no
/// more than `parent`: where a block indented more than `parent` ends.
fn block_end(lines: &[&str], from: usize, to: usize, parent: isize) -> usize {
    (from..to)
        .find(|&l| !blank(lines[l]) && indentation(lines[l]) as isize <= parent)
        .unwrap_or(to)
}

/// The line of `key:` among the keys of a block (the least-indented lines deeper than
/// `parent`), its indentation, and the column where its value starts on that line (if it
/// has one there).
fn find_key(
    lines: &[&str],
    from: usize,
    to: usize,
    parent: isize,
    key: &str,
) -> Option<(usize, usize, Option<usize>)> {
    let keys_indent = (from..to)
        .filter(|&l| !blank(lines[l]))
        .map(|l| indentation(lines[l]))
        .find(|&i| i as isize > parent)?;
    for (l, &text) in lines.iter().enumerate().take(to).skip(from) {
        if blank(text) || indentation(text) != keys_indent {
            continue;
        }
        let t = &text[keys_indent..];
        let Some(name_len) = [key.to_owned(), format!("\"{key}\""), format!("'{key}'")]
            .into_iter()
            .find(|k| t.starts_with(k.as_str()) && t[k.len()..].trim_start().starts_with(':'))
            .map(|k| k.len())
        else {
            continue;
        };
        let after_colon = t[name_len..].find(':').map(|c| name_len + c + 1)?;
        let value = &t[after_colon..];
        let value_col = (!blank(value))
            .then(|| keys_indent + after_colon + (value.len() - value.trim_start().len()));
        return Some((l, keys_indent, value_col));
    }
    None
}

/// Column of item `i` of the flow sequence starting at `start` (the `[`).
fn flow_item(line: &str, start: usize, i: usize) -> Option<usize> {
    let b = line.as_bytes();
    let (mut n, mut depth, mut quote) = (0, 0, None::<u8>);
    let mut item_start = None;
    for (c, &ch) in b.iter().enumerate().skip(start) {
        if let Some(q) = quote {
            if ch == q {
                quote = None;
            }
            continue;
        }
        match ch {
            b'[' | b'{' => {
                depth += 1;
                if depth == 1 {
                    item_start = None;
                    continue;
                }
            }
            b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return None;
                }
            }
            b',' if depth == 1 => {
                n += 1;
                item_start = None;
                continue;
            }
            b'"' | b'\'' => quote = Some(ch),
            b' ' => continue,
            _ => {}
        }
        if depth >= 1 && item_start.is_none() {
            item_start = Some(c);
            if n == i {
                return Some(c);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::locate;

    #[test]
    fn finds_keys_block_and_flow_items() {
        let text = "\
# a policy
files:
  deny:
    - /a
    # a comment
    - \"/b\"
  read_only: [/x, '/y', \"/z\"]
network:
  listen:
  - 127.0.0.1/8
  - '[::1]:80'
  allow_dns: true
process:
  keep_capabilities: [net_raw]
";
        assert_eq!(locate(text, "files.deny[0]"), Some((4, 7)));
        assert_eq!(locate(text, "files.deny[1]"), Some((6, 7)));
        assert_eq!(locate(text, "files.read_only[0]"), Some((7, 15)));
        assert_eq!(locate(text, "files.read_only[1]"), Some((7, 19)));
        assert_eq!(locate(text, "files.read_only[2]"), Some((7, 25)));
        assert_eq!(locate(text, "network.listen[1]"), Some((11, 5)));
        assert_eq!(locate(text, "network.allow_dns"), Some((12, 14)));
        assert_eq!(locate(text, "process.keep_capabilities[0]"), Some((14, 23)));
        // What cannot be followed: the deepest part found.
        assert_eq!(locate(text, "files.deny[7]"), Some((3, 3)));
        assert_eq!(locate(text, "files.write[0]"), Some((2, 1)));
        assert_eq!(locate(text, "exec.deny[0]"), None);
    }
}
