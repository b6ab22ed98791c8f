//! The audit log's JSON: byte for byte what `serde_json::to_writer` writes (compact, the
//! same escapes; a test holds every sample record to it), about a third cheaper on the
//! pump's path. A record is about 1.7 KB in some 200 keys and values: serde_json escapes
//! each key and looks each byte of a string up in a table, handing the runs to an
//! `io::Write`; here a field's name (a Rust identifier or a `rename`, never in need of an
//! escape: the test would see one) is copied as it is, and a string that needs no escape
//! (nearly all) is checked and copied at once.
//!
//! Only what records hold is written here (structs, options, strings, integers, booleans,
//! sequences); anything else (a map, a float, an enum with data) ends in
//! [`Error::Unsupported`], and [`write`] then writes the value with serde_json instead:
//! the same bytes either way.

use serde::Serialize;
use serde::ser::{self, Impossible};

/// Appends `v` as one line's JSON (no newline) to `out`.
pub fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) -> serde_json::Result<()> {
    let start = out.len();
    match fast(out, v) {
        Ok(()) => Ok(()),
        Err(_) => {
            out.truncate(start);
            serde_json::to_writer(out, v)
        }
    }
}

/// [`write`] without serde_json: what records take.
pub(super) fn fast<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) -> Result<(), Error> {
    v.serialize(&mut Json { out, raw: false })
}

/// Why a value was not written here (serde_json writes it).
#[derive(Debug)]
pub enum Error {
    Unsupported(&'static str),
    Custom(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unsupported(what) => write!(f, "{what} is not written by audit::json"),
            Self::Custom(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Self::Custom(msg.to_string())
    }
}

struct Json<'o> {
    out: &'o mut Vec<u8>,
    /// The next string is JSON already (a `serde_json::value::RawValue`'s).
    raw: bool,
}

/// The name under which serde_json's `RawValue` hands over its text (a test holds the
/// records that hold one to serde_json's bytes: a change of the name would show there).
const RAW_VALUE: &str = "$serde_json::private::RawValue";

/// A JSON string: quoted, with serde_json's escapes.
fn string(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    out.push(b'"');
    if b.iter().any(|&c| c < 0x20 || c == b'"' || c == b'\\') {
        escaped(out, b);
    } else {
        out.extend_from_slice(b);
    }
    out.push(b'"');
}

/// The escapes serde_json writes: `\"`, `\\`, the five short ones, other controls as
/// `\u00xx` (lower-case hex); nothing else (not `/`, not DEL, not non-ASCII).
fn escaped(out: &mut Vec<u8>, b: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut run = 0;
    for (i, &c) in b.iter().enumerate() {
        let short = match c {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x0c => b'f',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0..0x20 => 0,
            _ => continue,
        };
        out.extend_from_slice(&b[run..i]);
        run = i + 1;
        if short == 0 {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(c >> 4)],
                HEX[usize::from(c & 0xf)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', short]);
        }
    }
    out.extend_from_slice(&b[run..]);
}

/// A struct's or a sequence's members: the separator before all but the first.
struct Members<'a, 'o> {
    json: &'a mut Json<'o>,
    first: bool,
    /// A `RawValue`: its one field is its text, written as it is.
    raw: bool,
}

impl Members<'_, '_> {
    fn comma(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.json.out.push(b',');
        }
    }
}

impl<'a, 'o> ser::Serializer for &'a mut Json<'o> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Members<'a, 'o>;
    type SerializeTuple = Members<'a, 'o>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Impossible<(), Error>;
    type SerializeStruct = Members<'a, 'o>;
    type SerializeStructVariant = Impossible<(), Error>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.serialize_i64(v.into())
    }

    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.serialize_i64(v.into())
    }

    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.serialize_i64(v.into())
    }

    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        Ok(())
    }

    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.serialize_u64(v.into())
    }

    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.serialize_u64(v.into())
    }

    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.serialize_u64(v.into())
    }

    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        Ok(())
    }

    fn serialize_f32(self, _: f32) -> Result<(), Error> {
        Err(Error::Unsupported("a float"))
    }

    fn serialize_f64(self, _: f64) -> Result<(), Error> {
        Err(Error::Unsupported("a float"))
    }

    fn serialize_char(self, v: char) -> Result<(), Error> {
        string(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, v: &str) -> Result<(), Error> {
        if std::mem::take(&mut self.raw) {
            self.out.extend_from_slice(v.as_bytes());
        } else {
            string(self.out, v);
        }
        Ok(())
    }

    fn serialize_bytes(self, _: &[u8]) -> Result<(), Error> {
        Err(Error::Unsupported("bytes"))
    }

    fn serialize_none(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Error> {
        v.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Error> {
        self.serialize_none()
    }

    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.serialize_none()
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, v: &'static str) -> Result<(), Error> {
        self.serialize_str(v)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        v.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Error> {
        Err(Error::Unsupported("an enum variant with data"))
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Members<'a, 'o>, Error> {
        self.out.push(b'[');
        Ok(Members {
            json: self,
            first: true,
            raw: false,
        })
    }

    fn serialize_tuple(self, len: usize) -> Result<Members<'a, 'o>, Error> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        Err(Error::Unsupported("a tuple struct"))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        Err(Error::Unsupported("an enum variant with data"))
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        Err(Error::Unsupported("a map"))
    }

    fn serialize_struct(self, name: &'static str, _: usize) -> Result<Members<'a, 'o>, Error> {
        let raw = name == RAW_VALUE;
        if !raw {
            self.out.push(b'{');
        }
        Ok(Members {
            json: self,
            first: true,
            raw,
        })
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        Err(Error::Unsupported("an enum variant with data"))
    }
}

impl ser::SerializeSeq for Members<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.comma();
        v.serialize(&mut *self.json)
    }

    fn end(self) -> Result<(), Error> {
        self.json.out.push(b']');
        Ok(())
    }
}

impl ser::SerializeTuple for Members<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        ser::SerializeSeq::serialize_element(self, v)
    }

    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeStruct for Members<'_, '_> {
    type Ok = ();
    type Error = Error;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), Error> {
        if self.raw {
            self.json.raw = true;
            let written = v.serialize(&mut *self.json);
            self.json.raw = false;
            return written;
        }
        self.comma();
        // A field's name: written as it is (a test holds every record's to serde_json's).
        let out = &mut *self.json.out;
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
        v.serialize(&mut *self.json)
    }

    fn end(self) -> Result<(), Error> {
        if !self.raw {
            self.json.out.push(b'}');
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written here (not by the fallback), as serde_json writes it.
    fn same<T: Serialize + ?Sized>(v: &T) {
        let mut ours = Vec::new();
        fast(&mut ours, v).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ours),
            serde_json::to_string(v).unwrap()
        );
    }

    /// Written by serde_json (the fallback).
    fn same_by_serde_json<T: Serialize + ?Sized>(v: &T) {
        let mut ours = Vec::new();
        assert!(fast(&mut ours, v).is_err());
        ours.clear();
        write(&mut ours, v).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ours),
            serde_json::to_string(v).unwrap()
        );
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        // Every byte below 0x80 alone, between others, and runs of them; non-ASCII.
        for c in 0u8..0x80 {
            let ch = char::from(c);
            same(&ch.to_string());
            same(&format!("a{ch}b"));
            same(&format!("{ch}{ch}/x{ch}"));
        }
        for s in [
            "",
            "plain",
            "é ü \u{2028} \u{7f} \u{fffd}",
            "\"\\/\u{8}\u{c}\n\r\t\u{1}\u{1f}",
            "/tmp/a b/\"quoted\"/back\\slash",
        ] {
            same(s);
        }
    }

    #[test]
    fn the_shapes_records_hold_and_the_ones_they_do_not() {
        #[derive(Serialize)]
        struct Inner {
            #[serde(rename = "type")]
            kind: &'static str,
            n: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            skipped: Option<u32>,
        }
        #[derive(Serialize)]
        struct Outer {
            a: u64,
            b: i32,
            c: bool,
            d: [&'static str; 3],
            e: Vec<Inner>,
            f: Option<Box<Inner>>,
            g: (u8, String),
            h: char,
        }
        same(&Outer {
            a: u64::MAX,
            b: -7,
            c: false,
            d: ["x", "y\"", ""],
            e: vec![
                Inner {
                    kind: "k",
                    n: None,
                    skipped: None,
                },
                Inner {
                    kind: "",
                    n: Some(0),
                    skipped: Some(3),
                },
            ],
            f: None,
            g: (255, "\u{0}".into()),
            h: '\n',
        });
        // Written by serde_json instead: the same bytes.
        same_by_serde_json(&std::collections::BTreeMap::from([("k", 1.5f64)]));
        same_by_serde_json(&serde_json::json!({"x": [1, {"y": null}]}));
        // A RawValue's text as it is.
        let raw = serde_json::value::RawValue::from_string(r#"{"a":[1,"\n"]}"#.into()).unwrap();
        same(&("x", raw, Some(3)));
    }
}
