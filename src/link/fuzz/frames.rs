//! The server's side of the session harness: the frames it crafts (the
//! handshake's replies, pushes well formed or not), what each must do to
//! the link ([`foresee`]), and where in what a server sent a wake-up must
//! have been read from ([`backing`]).

use std::ops::Range;
use std::time::Duration;

use crate::commands::{HandshakeStep, wake_channel};
use crate::link::limits::UNSOLICITED_BUDGET;
use crate::rules::NodeError;

/// The id that names the wake channel of the client under test.
pub(super) const CHANNEL: u64 = 0x5eed;

/// What bytes the harness crafted do to the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    Lives,
    Replica,
    ClusterMode,
    Protocol,
    Unsolicited,
    /// Any other failure: never expected.
    Other,
}

impl Fate {
    pub(super) fn of(error: &NodeError) -> Fate {
        match error {
            NodeError::Replica => Fate::Replica,
            NodeError::ClusterMode => Fate::ClusterMode,
            NodeError::Protocol(_) => Fate::Protocol,
            NodeError::Unsolicited => Fate::Unsolicited,
            _ => Fate::Other,
        }
    }
}

/// The delay a wake-up must carry.
#[derive(Debug, Clone, Copy)]
pub(super) enum Later {
    Now,
    After(u64),
    /// The message's delay is no number: either will do.
    Any,
}

impl Later {
    pub(super) fn allows(self, later: Option<Duration>) -> bool {
        match self {
            Later::Now => later.is_none(),
            Later::After(ms) => later == Some(Duration::from_millis(ms)),
            Later::Any => true,
        }
    }
}

/// A frame the harness crafted, and what it means.
#[derive(Debug, Clone)]
pub(super) struct Piece {
    pub(super) bytes: Vec<u8>,
    pub(super) is: Is,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Is {
    /// A reply to the oldest request, and what it does to the link.
    Reply(Fate),
    /// A push: the wake-up it carries for this client, and whether it
    /// confirms the subscription the link waits for.
    Push {
        wake: Option<(u64, Later)>,
        confirms: bool,
    },
    /// A push the decoder refuses, after its first `at` bytes.
    Broken { at: usize },
}

impl Piece {
    /// A reply that does `fate` to the link.
    fn reply(bytes: &[u8], fate: Fate) -> Piece {
        Piece {
            bytes: bytes.to_vec(),
            is: Is::Reply(fate),
        }
    }

    /// A push that tells this client nothing.
    fn silent(bytes: Vec<u8>) -> Piece {
        Piece {
            bytes,
            is: Is::Push {
                wake: None,
                confirms: false,
            },
        }
    }
}

/// What the link must do with `pieces`, read from the start of a frame
/// with `unsolicited` bytes counted already: the wake-ups it hands on, and
/// what becomes of it. Replies reset the budget of unsolicited bytes, each
/// push takes its length from it (a push that confirms the subscription
/// resets it once read), and the link fails on the push that exceeds it.
pub(super) fn foresee(pieces: &[Piece], mut unsolicited: usize) -> (Vec<(u64, Later)>, Fate) {
    let mut wakes = Vec::new();
    for piece in pieces {
        match piece.is {
            Is::Reply(Fate::Lives) => unsolicited = 0,
            Is::Reply(fate) => return (wakes, fate),
            Is::Broken { at } if unsolicited + at > UNSOLICITED_BUDGET => {
                return (wakes, Fate::Unsolicited);
            }
            Is::Broken { .. } => return (wakes, Fate::Protocol),
            Is::Push { .. } if unsolicited + piece.bytes.len() > UNSOLICITED_BUDGET => {
                return (wakes, Fate::Unsolicited);
            }
            Is::Push { wake, confirms } => {
                unsolicited = if confirms {
                    0
                } else {
                    unsolicited + piece.bytes.len()
                };
                wakes.extend(wake);
            }
        }
    }
    (wakes, Fate::Lives)
}

/// The push that `form` describes, for waiter `id`, on a link with a wake
/// channel or not (`wakes`): the low four bits of `form` pick one of
/// sixteen, bit 4 adds a delay (`ms`). Four in sixteen are wake-ups on this
/// client's channel; the others tell it nothing: a message on another
/// client's channel or on one a byte longer or shorter than ours, a pattern
/// message, a subscription confirmed (to our channel: the one the handshake
/// waits for) or to another, and malformed ones: an aggregate, a simple
/// string or an integer where a bulk string goes, an id past `u64` (or a
/// delay past it, which leaves the delay unsaid), an element too many, an
/// attribute inside, a header the decoder refuses.
pub(super) fn craft(form: u8, id: u64, ms: u8, wakes: bool) -> Piece {
    let ms = (form & 16 != 0).then(|| match ms {
        255 => u64::MAX,
        ms => u64::from(ms) * 10,
    });
    let payload = payload(id, ms);
    let payload = payload.as_bytes();
    let ours = &wake_channel(CHANNEL)[..];
    let other = &wake_channel(CHANNEL + 1)[..];
    let head = [b">3\r\n".to_vec(), bulk_of(b"message")].concat();
    let bytes = match form % 16 {
        0..=3 => return message(id, ms, wakes),
        4 => push_of(&[b"message", other, payload]),
        5 if id % 2 == 0 => push_of(&[b"message", &ours[..ours.len() - 1], payload]),
        5 => push_of(&[b"message", &[ours, b"0"].concat(), payload]),
        6 => push_of(&[b"pmessage", b"redlock-mio:wake:*", ours, payload]),
        7 => {
            return Piece {
                bytes: subscribed(ours),
                is: Is::Push {
                    wake: None,
                    confirms: wakes,
                },
            };
        }
        8 => subscribed(other),
        9 => [head, bulk_of(ours), b"*1\r\n".to_vec(), bulk_of(payload)].concat(),
        10 => [head, [b"+", ours, b"\r\n"].concat(), bulk_of(payload)].concat(),
        11 => {
            let head = [head, bulk_of(ours)].concat();
            let at = head.len();
            let bytes = [head, format!(":{id}\r\n").into_bytes()].concat();
            // RESP integers are signed 64-bit.
            if i64::try_from(id).is_err() {
                return Piece {
                    bytes,
                    is: Is::Broken { at },
                };
            }
            bytes
        }
        12 if ms.is_some() => {
            let payload = format!("{id} 99999999999999999999");
            return Piece {
                bytes: push_of(&[b"message", ours, payload.as_bytes()]),
                is: Is::Push {
                    wake: wakes.then_some((id, Later::Any)),
                    confirms: false,
                },
            };
        }
        12 => push_of(&[b"message", ours, b"18446744073709551616"]),
        13 => push_of(&[b"message", ours, payload, payload]),
        14 => [
            head,
            bulk_of(ours),
            b"|1\r\n+k\r\n+v\r\n".to_vec(),
            bulk_of(payload),
        ]
        .concat(),
        _ => {
            let header: &[u8] = match id % 2 {
                0 => b">2000\r\n",
                _ => b">99999999999999999999999\r\n",
            };
            return Piece {
                bytes: header.to_vec(),
                is: Is::Broken { at: 0 },
            };
        }
    };
    Piece::silent(bytes)
}

/// A wake-up on this client's channel for waiter `id`, to try at once or
/// after `ms`; it tells the link something if it has a wake channel
/// (`wakes`).
pub(super) fn message(id: u64, ms: Option<u64>, wakes: bool) -> Piece {
    let ours = wake_channel(CHANNEL);
    Piece {
        bytes: push_of(&[b"message", &ours, payload(id, ms).as_bytes()]),
        is: Is::Push {
            wake: wakes.then(|| (id, ms.map_or(Later::Now, Later::After))),
            confirms: false,
        },
    }
}

/// The answer to `HELLO 3`: the map Redis 7 answers, a loaded module and
/// all (nested three deep), or one of two refusals: from a server that
/// predates `HELLO`, or one that will not speak RESP3.
pub(super) fn hello(refusal: Option<u8>) -> Piece {
    let bytes: &[u8] = match refusal {
        None => {
            b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.4\r\n\
            $5\r\nproto\r\n:3\r\n$2\r\nid\r\n:7\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
            $4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*1\r\n%4\r\n$4\r\nname\r\n$4\r\njson\r\n\
            $3\r\nver\r\n:20000\r\n$4\r\npath\r\n$12\r\n/lib/json.so\r\n$4\r\nargs\r\n*0\r\n"
        }
        Some(n) if n % 2 == 0 => b"-ERR unknown command 'HELLO', with args beginning with: '3'\r\n",
        Some(_) => b"-NOPROTO sorry, this protocol version is not supported.\r\n",
    };
    Piece::reply(bytes, Fate::Lives)
}

/// The answer to `SUBSCRIBE` (which the link waits for): its
/// confirmation, or a refusal.
pub(super) fn subscription(refused: bool) -> Piece {
    if refused {
        return Piece::reply(
            b"-NOPERM this user has no permissions to access one of the channels\r\n",
            Fate::Lives,
        );
    }
    Piece {
        bytes: subscribed(&wake_channel(CHANNEL)),
        is: Is::Push {
            wake: None,
            confirms: true,
        },
    }
}

/// The right reply to handshake step `step` (neither `HELLO` nor
/// `SUBSCRIBE`): `OK`, a script's SHA-1, the marker (missing with bit 5 of
/// `flavour`), or the `INFO` text that `flavour` describes (a verbatim
/// string over RESP3), which fails the link if it says replica or cluster
/// node.
pub(super) fn step_reply(step: HandshakeStep, flavour: u8, resp3: bool) -> Piece {
    let mut bytes = Vec::new();
    let mut fate = Fate::Lives;
    match step {
        HandshakeStep::Auth | HandshakeStep::Select | HandshakeStep::Tracking => {
            bytes.extend_from_slice(b"+OK\r\n")
        }
        HandshakeStep::Identify => {
            let run_id = char::from(b'a' + flavour % 6);
            let role = if flavour & 64 != 0 { "slave" } else { "master" };
            let uptime = u64::from(flavour >> 3);
            let text = format!(
                "# Server\r\nrun_id:{}\r\nuptime_in_seconds:{uptime}\r\n\r\n\
                 # Replication\r\nrole:{role}\r\n\r\n# Cluster\r\ncluster_enabled:{}\r\n",
                run_id.to_string().repeat(40),
                u8::from(flavour & 128 != 0),
            );
            if resp3 {
                let text = format!("txt:{text}");
                bytes = format!("={}\r\n{text}\r\n", text.len()).into_bytes();
            } else {
                bulk(&mut bytes, text.as_bytes());
            }
            fate = match flavour {
                f if f & 64 != 0 => Fate::Replica,
                f if f & 128 != 0 => Fate::ClusterMode,
                _ => Fate::Lives,
            };
        }
        HandshakeStep::Marker if flavour & 32 != 0 => bytes.extend_from_slice(b"_\r\n"),
        HandshakeStep::Marker => bulk(&mut bytes, &[b'm'; 32]),
        script => {
            let sha = script.script().map_or("", |script| script.sha1());
            bulk(&mut bytes, sha.as_bytes());
        }
    }
    Piece {
        bytes,
        is: Is::Reply(fate),
    }
}

/// Where the first message on `channel` that tells waiter `id` (with delay
/// `later`, if any) ends in `stream`: its channel's bulk string, then a
/// payload whose first field is `id` (and second `later`'s milliseconds).
/// What a wake-up must have been read from, whatever else the bytes say.
pub(super) fn backing(
    stream: &[u8],
    channel: &[u8],
    id: u64,
    later: Option<Duration>,
) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = find(&stream[from..], channel) {
        let payload = next_bulk(stream, from + at + channel.len());
        from += at + 1;
        let Some(payload) = payload else {
            continue;
        };
        let mut fields = stream[payload.clone()].splitn(2, |&b| b == b' ');
        let told = fields.next().and_then(number) == Some(id)
            && later.is_none_or(|later| {
                fields.next().and_then(number).map(Duration::from_millis) == Some(later)
            });
        if told {
            return Some(payload.end);
        }
    }
    None
}

/// Where in `stream` the payload lies of the bulk string that follows the
/// one whose bytes end at `at`.
fn next_bulk(stream: &[u8], at: usize) -> Option<Range<usize>> {
    let header = stream.get(at..)?.strip_prefix(b"\r\n$")?;
    let line = find(header, b"\r\n")?;
    let len = usize::try_from(number(&header[..line])?).ok()?;
    let start = at + 3 + line + 2;
    let end = start.checked_add(len)?;
    (end <= stream.len()).then_some(start..end)
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `digits` as a decimal number.
fn number(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The push that confirms a subscription to `channel`.
fn subscribed(channel: &[u8]) -> Vec<u8> {
    let confirmed = [b">3\r\n".to_vec(), bulk_of(b"subscribe"), bulk_of(channel)];
    [&confirmed.concat()[..], b":1\r\n"].concat()
}

/// A wake-up's payload: the waiter's id, and the delay if any.
fn payload(id: u64, ms: Option<u64>) -> String {
    match ms {
        Some(ms) => format!("{id} {ms}"),
        None => id.to_string(),
    }
}

/// `elements` as a RESP3 push of bulk strings.
fn push_of(elements: &[&[u8]]) -> Vec<u8> {
    let mut out = format!(">{}\r\n", elements.len()).into_bytes();
    for element in elements {
        bulk(&mut out, element);
    }
    out
}

/// `text` as a RESP bulk string.
fn bulk_of(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    bulk(&mut out, text);
    out
}

/// `text` as a RESP bulk string, appended to `out`.
pub(super) fn bulk(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", text.len()).as_bytes());
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{CHANNEL, backing, push_of, wake_channel};

    /// The harness finds a wake-up only in a message on the client's own
    /// channel, with its id and delay, each message once.
    #[test]
    fn a_wake_up_is_backed_by_its_message_alone() {
        let ours = wake_channel(CHANNEL);
        let other = wake_channel(CHANNEL + 1);
        let stream = [
            push_of(&[b"message", &other, b"7"]),
            push_of(&[b"message", &ours, b"42 300"]),
        ]
        .concat();
        let ms = |ms| Some(Duration::from_millis(ms));
        let end = backing(&stream, &ours, 42, ms(300));
        assert_eq!(end, Some(stream.len() - 2));
        assert_eq!(backing(&stream, &ours, 42, None), end);
        assert_eq!(backing(&stream, &ours, 7, None), None, "another channel's");
        assert_eq!(backing(&stream, &ours, 42, ms(30)), None, "another delay");
        let rest = &stream[end.unwrap_or(0)..];
        assert_eq!(backing(rest, &ours, 42, None), None, "twice");
    }
}
