//! The commands on sorted sets: what the wait queue's scripts call
//! (`ZADD NX`, `ZRANGE` by rank, `ZREM`, `ZRANK`) and what tests read and other
//! clients write (`ZCARD`, `ZSCORE`, `ZADD`'s other options).

use super::{Ctx, not_an_integer, parse_int, syntax_error};
use crate::numbers::parse_float;
use crate::reply::Reply;

/// The options of `ZADD` (all but `INCR`, which the model refuses).
#[derive(Debug, Default)]
struct ZaddOptions {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
}

impl ZaddOptions {
    /// Reads the options from the start of `words` (those after the key)
    /// as Redis does, up to the first word that is none: the options and
    /// the score-member pairs after them. The checks follow Redis's order.
    fn parse(words: &[Vec<u8>]) -> Result<(ZaddOptions, &[Vec<u8>]), Reply> {
        let mut options = ZaddOptions::default();
        let mut incr = false;
        let mut at = 0;
        while let Some(word) = words.get(at) {
            match word.to_ascii_uppercase().as_slice() {
                b"NX" => options.nx = true,
                b"XX" => options.xx = true,
                b"GT" => options.gt = true,
                b"LT" => options.lt = true,
                b"CH" => options.ch = true,
                b"INCR" => incr = true,
                _ => break,
            }
            at += 1;
        }
        let pairs = &words[at..];
        if pairs.is_empty() || pairs.len() % 2 != 0 {
            return Err(syntax_error());
        }
        let ZaddOptions { nx, xx, gt, lt, .. } = options;
        if nx && xx {
            return Err(Reply::error(
                "ERR XX and NX options at the same time are not compatible",
            ));
        }
        if (gt || lt) && nx || gt && lt {
            return Err(Reply::error(
                "ERR GT, LT, and/or NX options at the same time are not compatible",
            ));
        }
        if incr && pairs.len() > 2 {
            return Err(Reply::error(
                "ERR INCR option supports a single increment-element pair",
            ));
        }
        if incr {
            return Err(Reply::error("ERR the model does not implement ZADD INCR"));
        }
        Ok((options, pairs))
    }

    /// Whether a member whose score is `current` (`None`: not a member)
    /// takes `score`.
    fn allow(&self, current: Option<f64>, score: f64) -> bool {
        match current {
            None => !self.xx,
            Some(current) => {
                !(self.nx || self.lt && score >= current || self.gt && score <= current)
            }
        }
    }
}

/// `ZADD key [NX|XX] [GT|LT] [CH] score member [score member ...]`: the
/// members added (and changed, with `CH`). Every score is read before any
/// member is added, so that a bad one changes nothing.
pub(super) fn zadd(c: &mut Ctx<'_>) -> Reply {
    let (options, pairs) = match ZaddOptions::parse(&c.words[2..]) {
        Ok(parsed) => parsed,
        Err(reply) => return reply,
    };
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        match parse_float(&pair[0]) {
            Some(score) => scores.push((score, &pair[1])),
            None => return Reply::error("ERR value is not a valid float"),
        }
    }
    let db = c.server.db(c.session);
    let key = &c.words[1];
    match db.zset(key, c.now) {
        Err(wrong) => return wrong.into(),
        Ok(None) if options.xx => return Reply::Integer(0),
        Ok(_) => {}
    }
    let zset = match db.zset_or_new(key, c.now) {
        Ok(zset) => zset,
        Err(wrong) => return wrong.into(),
    };
    let (mut added, mut changed) = (0, 0);
    for (score, member) in scores {
        let current = zset.score(member);
        if !options.allow(current, score) {
            continue;
        }
        match current {
            None => added += 1,
            Some(current) if current != score => changed += 1,
            Some(_) => continue,
        }
        zset.insert(member, score);
    }
    if added + changed > 0 {
        db.touch(key);
    }
    Reply::Integer(if options.ch { added + changed } else { added })
}

/// `ZREM key member...`: how many were members. A set left empty goes.
pub(super) fn zrem(c: &mut Ctx<'_>) -> Reply {
    let db = c.server.db(c.session);
    let key = &c.words[1];
    let zset = match db.zset(key, c.now) {
        Ok(Some(zset)) => zset,
        Ok(None) => return Reply::Integer(0),
        Err(wrong) => return wrong.into(),
    };
    let removed = c.words[2..].iter().filter(|m| zset.remove(m)).count();
    if zset.is_empty() {
        db.remove(key, c.now);
    } else if removed > 0 {
        db.touch(key);
    }
    Reply::Integer(removed as i64)
}

/// `ZRANGE key start stop [REV]`: the members of those ranks. The
/// options the scripts never send (`BYSCORE`, `BYLEX`, `LIMIT`,
/// `WITHSCORES`) are refused.
pub(super) fn zrange(c: &mut Ctx<'_>) -> Reply {
    let mut reverse = false;
    for word in &c.words[4..] {
        match word.to_ascii_uppercase().as_slice() {
            b"REV" if !reverse => reverse = true,
            b"BYSCORE" | b"BYLEX" | b"LIMIT" | b"WITHSCORES" => {
                let option = String::from_utf8_lossy(word);
                return Reply::error(format!("ERR the model does not implement ZRANGE {option}"));
            }
            _ => return syntax_error(),
        }
    }
    let (Some(start), Some(stop)) = (parse_int(&c.words[2]), parse_int(&c.words[3])) else {
        return not_an_integer();
    };
    match c.server.db(c.session).zset(&c.words[1], c.now) {
        Ok(Some(zset)) => Reply::Array(
            zset.range(start, stop, reverse)
                .into_iter()
                .map(|(member, _)| Reply::bulk(member))
                .collect(),
        ),
        Ok(None) => Reply::Array(Vec::new()),
        Err(wrong) => wrong.into(),
    }
}

/// `ZCARD key`.
pub(super) fn zcard(c: &mut Ctx<'_>) -> Reply {
    match c.server.db(c.session).zset(&c.words[1], c.now) {
        Ok(zset) => Reply::Integer(zset.map_or(0, |zset| zset.len() as i64)),
        Err(wrong) => wrong.into(),
    }
}

/// `ZSCORE key member`.
pub(super) fn zscore(c: &mut Ctx<'_>) -> Reply {
    match c.server.db(c.session).zset(&c.words[1], c.now) {
        Ok(zset) => zset
            .and_then(|zset| zset.score(&c.words[2]))
            .map_or(Reply::Null, Reply::Double),
        Err(wrong) => wrong.into(),
    }
}

/// `ZRANK key member`: its rank, or nil if it is not a member (the
/// option the scripts never send, `WITHSCORE`, is refused).
pub(super) fn zrank(c: &mut Ctx<'_>) -> Reply {
    if c.words.len() > 3 {
        return Reply::error("ERR the model does not implement ZRANK WITHSCORE");
    }
    match c.server.db(c.session).zset(&c.words[1], c.now) {
        Ok(zset) => zset
            .and_then(|zset| zset.rank(&c.words[2]))
            .map_or(Reply::Null, |rank| Reply::Integer(rank as i64)),
        Err(wrong) => wrong.into(),
    }
}
