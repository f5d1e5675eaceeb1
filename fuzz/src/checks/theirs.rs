//! For the [`oracle`](super::oracle) check: redis-protocol's side, its
//! RESP2 and RESP3 decoders' first frame as a normalised [`Node`].

use super::tree::{Node, Value};
use redis_protocol::resp2::decode::decode_range as resp2_decode_range;
use redis_protocol::resp2::types::RangeFrame as Resp2Frame;
use redis_protocol::resp3::decode::streaming::decode_range as resp3_decode_range;
use redis_protocol::resp3::types::{
    DecodedRangeFrame, FrameKind, RangeFrame as Resp3Frame, VerbatimStringFormat,
};

/// How an oracle ended on the first frame.
#[derive(Debug)]
pub(super) enum Theirs {
    Frame(Node, usize),
    Partial,
    Failed(String),
}

fn resp2_node(buf: &[u8], frame: &Resp2Frame) -> Node {
    Node::plain(match frame {
        Resp2Frame::SimpleString((s, e)) => Value::Simple(buf[*s..*e].to_vec()),
        Resp2Frame::Error((s, e)) => Value::Error(buf[*s..*e].to_vec()),
        Resp2Frame::Integer(n) => Value::Integer(*n),
        Resp2Frame::BulkString((s, e)) => Value::Bulk(buf[*s..*e].to_vec()),
        Resp2Frame::Array(items) => {
            Value::Array(items.iter().map(|f| resp2_node(buf, f)).collect())
        }
        Resp2Frame::Null => Value::Null,
    })
}

pub(super) fn resp2(data: &[u8]) -> Theirs {
    match resp2_decode_range(data) {
        Ok(Some((frame, len))) => Theirs::Frame(resp2_node(data, &frame), len),
        Ok(None) => Theirs::Partial,
        Err(e) => Theirs::Failed(format!("{e:?}")),
    }
}

type Resp3Attrs = std::collections::HashMap<Resp3Frame, Resp3Frame>;

fn resp3_pairs<'m>(
    buf: &[u8],
    pairs: impl Iterator<Item = (&'m Resp3Frame, &'m Resp3Frame)>,
) -> Vec<(Node, Node)> {
    pairs
        .map(|(k, v)| (resp3_node(buf, k), resp3_node(buf, v)))
        .collect()
}

fn resp3_attrs(buf: &[u8], attrs: Option<&Resp3Attrs>) -> Vec<Vec<(Node, Node)>> {
    attrs
        .map(|a| resp3_pairs(buf, a.iter()))
        .into_iter()
        .collect()
}

fn resp3_node(buf: &[u8], frame: &Resp3Frame) -> Node {
    let bytes = |(s, e): &(usize, usize)| buf[*s..*e].to_vec();
    let nodes = |items: &[Resp3Frame]| items.iter().map(|f| resp3_node(buf, f)).collect();
    let (value, attrs) = match frame {
        Resp3Frame::BlobString { data, attributes } => (Value::Bulk(bytes(data)), attributes),
        Resp3Frame::BlobError { data, attributes } => (Value::BulkError(bytes(data)), attributes),
        Resp3Frame::SimpleString { data, attributes } => (Value::Simple(bytes(data)), attributes),
        Resp3Frame::SimpleError { data, attributes } => (Value::Error(bytes(data)), attributes),
        Resp3Frame::Boolean { data, attributes } => (Value::Boolean(*data), attributes),
        Resp3Frame::Null => (Value::Null, &None),
        Resp3Frame::Number { data, attributes } => (Value::Integer(*data), attributes),
        Resp3Frame::Double { data, attributes } => (Value::Double(data.to_bits()), attributes),
        Resp3Frame::BigNumber { data, attributes } => (Value::BigNumber(bytes(data)), attributes),
        Resp3Frame::VerbatimString {
            data,
            format,
            attributes,
        } => {
            let format = match format {
                VerbatimStringFormat::Text => *b"txt",
                VerbatimStringFormat::Markdown => *b"mkd",
            };
            (Value::Verbatim(format, bytes(data)), attributes)
        }
        Resp3Frame::Array { data, attributes } => (Value::Array(nodes(data)), attributes),
        Resp3Frame::Push { data, attributes } => (Value::Push(nodes(data)), attributes),
        Resp3Frame::Set { data, attributes } => (
            Value::Set(data.iter().map(|f| resp3_node(buf, f)).collect()),
            attributes,
        ),
        Resp3Frame::Map { data, attributes } => {
            (Value::Map(resp3_pairs(buf, data.iter())), attributes)
        }
        Resp3Frame::Hello { .. } => (Value::Hello, &None),
        Resp3Frame::ChunkedString(range) => {
            if frame.kind() == FrameKind::EndStream {
                (Value::End, &None)
            } else {
                (Value::Chunk(bytes(range)), &None)
            }
        }
    };
    Node {
        attrs: resp3_attrs(buf, attrs.as_ref()),
        value,
    }
}

/// redis-protocol's RESP3 decoder on the first frame; a top-level streamed
/// frame is collected from its parts the way its `StreamedFrame` does.
pub(super) fn resp3(data: &[u8]) -> Theirs {
    let (header, mut at) = match resp3_decode_range(data) {
        Ok(Some((DecodedRangeFrame::Complete(frame), len))) => {
            return Theirs::Frame(resp3_node(data, &frame), len);
        }
        Ok(Some((DecodedRangeFrame::Streaming(header), len))) => (header, len),
        Ok(None) => return Theirs::Partial,
        Err(e) => return Theirs::Failed(format!("{e:?}")),
    };
    let mut parts = Vec::new();
    loop {
        let rest = &data[at..];
        match resp3_decode_range(rest) {
            Ok(Some((DecodedRangeFrame::Complete(frame), len))) => {
                at += len;
                if frame.kind() == FrameKind::EndStream {
                    break;
                }
                parts.push(resp3_node(rest, &frame));
            }
            Ok(Some((DecodedRangeFrame::Streaming(_), _))) => {
                return Theirs::Failed("stream inside a stream".into());
            }
            Ok(None) => return Theirs::Partial,
            Err(e) => return Theirs::Failed(format!("{e:?}")),
        }
    }
    let hashable = |node: &Node| {
        !matches!(
            node.value,
            Value::Array(_) | Value::Set(_) | Value::Push(_) | Value::Map(_)
        )
    };
    let value = match header.kind {
        FrameKind::BlobString => {
            let mut text = Vec::new();
            for part in parts {
                match part.value {
                    Value::Chunk(bytes) | Value::Bulk(bytes) => text.extend(bytes),
                    other => return Theirs::Failed(format!("{other:?} in a streamed string")),
                }
            }
            Value::Bulk(text)
        }
        FrameKind::Array => Value::Array(parts),
        FrameKind::Set => {
            if !parts.iter().all(hashable) {
                return Theirs::Failed("unhashable set member".into());
            }
            Value::Set(parts)
        }
        FrameKind::Map => {
            if parts.len() % 2 != 0 {
                return Theirs::Failed("odd streamed map".into());
            }
            let mut pairs = Vec::new();
            let mut parts = parts.into_iter();
            while let (Some(k), Some(v)) = (parts.next(), parts.next()) {
                if !hashable(&k) {
                    return Theirs::Failed("unhashable map key".into());
                }
                pairs.push((k, v));
            }
            Value::Map(pairs)
        }
        other => return Theirs::Failed(format!("streamed {other:?}")),
    };
    Theirs::Frame(
        Node {
            attrs: resp3_attrs(data, header.attributes.as_ref()),
            value,
        },
        at,
    )
}
