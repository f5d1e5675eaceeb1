//! For the [`oracle`](super::oracle) check: the normalised tree both
//! decoders' results are compared as, and the builder of ours from our
//! tokens, which notes what the frame uses (see the comment in
//! `differential.rs` for STRICTER and the collisions).

use redlock_mio::resp::{NullKind, Token};

/// A normalised value: what both decoders' results are compared as.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Value {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    BulkError(Vec<u8>),
    Verbatim([u8; 3], Vec<u8>),
    Null,
    /// The bits of the `f64`.
    Double(u64),
    Boolean(bool),
    BigNumber(Vec<u8>),
    Array(Vec<Node>),
    Set(Vec<Node>),
    Push(Vec<Node>),
    Map(Vec<(Node, Node)>),
    /// redis-protocol only: a `HELLO` command.
    Hello,
    /// redis-protocol only: a chunk as a frame of its own.
    Chunk(Vec<u8>),
    /// redis-protocol only: an end marker as a frame of its own.
    End,
    /// Ours only: the input ended here.
    Missing,
}

/// A normalised value with the attributes annotating it, outermost first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Node {
    pub(super) attrs: Vec<Vec<(Node, Node)>>,
    pub(super) value: Value,
}

impl Node {
    pub(super) fn plain(value: Value) -> Node {
        Node {
            attrs: Vec::new(),
            value,
        }
    }

    /// Sorts maps, sets and attributes, recursively.
    pub(super) fn canonical(mut self) -> Node {
        fn pairs(pairs: Vec<(Node, Node)>) -> Vec<(Node, Node)> {
            let mut pairs: Vec<_> = pairs
                .into_iter()
                .map(|(k, v)| (k.canonical(), v.canonical()))
                .collect();
            pairs.sort();
            pairs
        }
        fn nodes(nodes: Vec<Node>) -> Vec<Node> {
            nodes.into_iter().map(Node::canonical).collect()
        }
        self.attrs = self.attrs.into_iter().map(pairs).collect();
        self.value = match self.value {
            Value::Array(items) => Value::Array(nodes(items)),
            Value::Push(items) => Value::Push(nodes(items)),
            Value::Set(items) => {
                let mut items = nodes(items);
                items.sort();
                Value::Set(items)
            }
            Value::Map(items) => Value::Map(pairs(items)),
            other => other,
        };
        self
    }
}

/// What a frame of ours uses that matters to the comparison.
#[derive(Debug, Default)]
pub(super) struct Features {
    /// Anything beyond RESP2.
    pub(super) resp3: bool,
    /// A RESP2 null (`$-1`, `*-1`).
    pub(super) resp2_null: bool,
    /// Keys equal by value in one map, set or attribute.
    pub(super) collision: bool,
    /// The first reason the oracle is stricter (STRICTER a-f), if any.
    pub(super) stricter: Option<&'static str>,
}

impl Features {
    fn stricter(&mut self, why: &'static str) {
        self.stricter.get_or_insert(why);
    }
}

/// Builds our tree from our tokens.
pub(super) struct Builder<'t, 'a> {
    pub(super) tokens: core::slice::Iter<'t, Token<'a>>,
    pub(super) features: Features,
}

impl Builder<'_, '_> {
    pub(super) fn node(&mut self, depth: usize) -> Node {
        let mut attrs = Vec::new();
        let token = loop {
            match self.tokens.next() {
                None => {
                    return Node {
                        attrs,
                        value: Value::Missing,
                    };
                }
                Some(Token::Attribute(n)) => {
                    self.features.resp3 = true;
                    if !attrs.is_empty() {
                        self.features.stricter("d: attribute on an attribute");
                    }
                    let pairs = self.pairs(*n, depth);
                    attrs.push(pairs);
                }
                Some(token) => break *token,
            }
        };
        let value = self.value(token, depth);
        if value == Value::Null && !attrs.is_empty() {
            self.features.stricter("c: attributes on a null");
        }
        Node { attrs, value }
    }

    fn value(&mut self, token: Token<'_>, depth: usize) -> Value {
        if !matches!(
            token,
            Token::Simple(_)
                | Token::Error(_)
                | Token::Integer(_)
                | Token::Bulk(_)
                | Token::Null(NullKind::Bulk | NullKind::Array)
                | Token::Array(_)
        ) {
            self.features.resp3 = true;
        }
        let streamed = matches!(
            token,
            Token::StreamedString | Token::StreamedArray | Token::StreamedSet | Token::StreamedMap
        );
        if streamed && depth > 0 {
            self.features.stricter("f: nested streamed type");
        }
        match token {
            Token::Simple(s) => Value::Simple(s.to_vec()),
            Token::Error(s) => Value::Error(s.to_vec()),
            Token::Integer(n) => Value::Integer(n),
            Token::Bulk(s) => Value::Bulk(s.to_vec()),
            Token::BulkError(s) => Value::BulkError(s.to_vec()),
            Token::Verbatim { format, text } => {
                if &format != b"txt" && &format != b"mkd" {
                    self.features.stricter("a: verbatim format");
                }
                Value::Verbatim(format, text.to_vec())
            }
            Token::Null(kind) => {
                if kind != NullKind::Null {
                    self.features.resp2_null = true;
                }
                Value::Null
            }
            Token::Double(x) => Value::Double(x.to_bits()),
            Token::Boolean(b) => Value::Boolean(b),
            Token::BigNumber(s) => Value::BigNumber(s.to_vec()),
            Token::Array(n) => Value::Array(self.nodes(n, depth)),
            Token::Push(n) => Value::Push(self.nodes(n, depth)),
            Token::Set(n) => {
                let items = self.nodes(n, depth);
                self.keys(items.iter());
                Value::Set(items)
            }
            Token::Map(n) => Value::Map(self.pairs(n, depth)),
            Token::StreamedString => {
                let mut text = Vec::new();
                loop {
                    match self.tokens.next() {
                        None => break Value::Missing,
                        Some(Token::Chunk(part)) => text.extend_from_slice(part),
                        Some(Token::End) => break Value::Bulk(text),
                        Some(other) => panic!("{other:?} inside a streamed string"),
                    }
                }
            }
            Token::StreamedArray => Value::Array(self.streamed(depth)),
            Token::StreamedSet => {
                let items = self.streamed(depth);
                self.keys(items.iter());
                Value::Set(items)
            }
            Token::StreamedMap => {
                let mut items = self.streamed(depth).into_iter();
                let mut pairs = Vec::new();
                while let Some(key) = items.next() {
                    let value = items.next().unwrap_or_else(|| Node::plain(Value::Missing));
                    pairs.push((key, value));
                }
                self.keys(pairs.iter().map(|(k, _)| k));
                Value::Map(pairs)
            }
            Token::Attribute(_) | Token::Chunk(_) | Token::End => {
                panic!("{token:?} where a value must stand")
            }
        }
    }

    fn nodes(&mut self, n: usize, depth: usize) -> Vec<Node> {
        let mut items = Vec::new();
        for _ in 0..n {
            let node = self.node(depth + 1);
            let missing = node.value == Value::Missing;
            items.push(node);
            if missing {
                break;
            }
        }
        items
    }

    fn pairs(&mut self, n: usize, depth: usize) -> Vec<(Node, Node)> {
        let mut items = self.nodes(n.saturating_mul(2), depth).into_iter();
        let mut pairs = Vec::new();
        while let Some(key) = items.next() {
            let value = items.next().unwrap_or_else(|| Node::plain(Value::Missing));
            pairs.push((key, value));
        }
        self.keys(pairs.iter().map(|(k, _)| k));
        pairs
    }

    /// The elements of a streamed aggregate, through its end marker.
    fn streamed(&mut self, depth: usize) -> Vec<Node> {
        let mut items = Vec::new();
        loop {
            if self.tokens.as_slice().first() == Some(&Token::End) {
                self.tokens.next();
                return items;
            }
            let node = self.node(depth + 1);
            let missing = node.value == Value::Missing;
            items.push(node);
            if missing {
                return items;
            }
        }
    }

    /// Checks keys (or set members) for STRICTER b and for collisions.
    fn keys<'n>(&mut self, keys: impl Iterator<Item = &'n Node>) {
        let mut scalars: Vec<(u8, i128)> = Vec::new();
        for key in keys {
            let scalar = match key.value {
                Value::Array(_) | Value::Set(_) | Value::Push(_) | Value::Map(_) => {
                    self.features.stricter("b: aggregate as a key");
                    continue;
                }
                Value::Integer(n) => (0, i128::from(n)),
                Value::Boolean(b) => (1, i128::from(b)),
                Value::Null => (2, 0),
                Value::Double(bits) => {
                    // Compared with `==`: 0.0 and -0.0 are equal.
                    let x = f64::from_bits(bits);
                    (3, i128::from(if x == 0.0 { 0 } else { bits }))
                }
                _ => continue,
            };
            if scalars.contains(&scalar) {
                self.features.collision = true;
            }
            scalars.push(scalar);
        }
    }
}
