//! The [`roundtrip`] check of the command encoder: announced length,
//! canonical bytes, and decoding back to the arguments.

use arbitrary::{Arbitrary, Unstructured};
use redlock_mio::resp::{Arg, Decoder, Status, Token, command_len, encode_command};

/// A command argument, as the fuzzer builds it.
#[derive(Debug, Arbitrary)]
enum FuzzArg {
    /// Bytes, sent as they are.
    Bytes(Vec<u8>),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
}

/// A command, as the fuzzer builds it.
#[derive(Debug, Arbitrary)]
struct Command {
    args: Vec<FuzzArg>,
}

/// Builds a [`Command`] from the bytes with [`Arbitrary`], encodes it with
/// [`encode_command`] into a `Vec` (empty, and after existing bytes) and a
/// `BytesMut`, and checks:
///
/// - [`command_len`] is the number of bytes written;
/// - the bytes are the canonical encoding (`*N`, then `$len` and the
///   payload for each argument, integers in decimal), built here
///   independently, identical for both buffers;
/// - decoding them gives `Array(N)` then `N` `Bulk` tokens holding the
///   arguments, the last token ends the frame, nothing is left over.
pub fn roundtrip(data: &[u8]) {
    let Ok(command) = Command::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let texts: Vec<Vec<u8>> = command
        .args
        .iter()
        .map(|arg| match arg {
            FuzzArg::Bytes(bytes) => bytes.clone(),
            FuzzArg::Int(n) => n.to_string().into_bytes(),
            FuzzArg::Uint(n) => n.to_string().into_bytes(),
        })
        .collect();
    let args: Vec<Arg<'_>> = command
        .args
        .iter()
        .map(|arg| match arg {
            FuzzArg::Bytes(bytes) => Arg::Bytes(bytes),
            FuzzArg::Int(n) => Arg::Int(*n),
            FuzzArg::Uint(n) => Arg::Uint(*n),
        })
        .collect();

    let mut canonical = format!("*{}\r\n", texts.len()).into_bytes();
    for text in &texts {
        canonical.extend_from_slice(format!("${}\r\n", text.len()).as_bytes());
        canonical.extend_from_slice(text);
        canonical.extend_from_slice(b"\r\n");
    }

    let mut vec = Vec::new();
    encode_command(&mut vec, &args);
    assert_eq!(
        command_len(&args),
        vec.len(),
        "command_len disagrees with the output"
    );
    assert!(
        vec == canonical,
        "not the canonical encoding of {command:?}"
    );

    let mut appended = b"prefix".to_vec();
    encode_command(&mut appended, &args);
    assert_eq!(&appended[..6], b"prefix");
    assert!(
        appended[6..] == canonical[..],
        "encoding after existing bytes differs"
    );

    let mut bytes_mut = bytes::BytesMut::new();
    encode_command(&mut bytes_mut, &args);
    assert!(
        bytes_mut[..] == vec[..],
        "BytesMut and Vec encodings differ"
    );

    let mut decoder = Decoder::new();
    let mut rest = &vec[..];
    let mut next = || match decoder.decode(rest) {
        Ok(Status::Complete(decoded)) => {
            rest = &rest[decoded.len..];
            decoded
        }
        other => panic!("encoded command does not decode: {other:?} for {command:?}"),
    };
    let header = next();
    assert_eq!(header.token, Token::Array(texts.len()));
    assert_eq!(header.frame_end, texts.is_empty());
    for (i, text) in texts.iter().enumerate() {
        let decoded = next();
        assert_eq!(decoded.token, Token::Bulk(text), "argument {i}");
        assert_eq!(
            decoded.frame_end,
            i + 1 == texts.len(),
            "argument {i}: frame_end"
        );
    }
    assert!(rest.is_empty(), "{} bytes left over", rest.len());
    assert!(decoder.is_idle());
}
