//! Decoder tests of the grammar: every RESP2 and RESP3 type, frame ends,
//! attributes, streamed strings and aggregates, and the `Debug` forms.

use super::*;

#[test]
fn resp2_types() {
    assert_eq!(tokens(b"+OK\r\n"), ["Simple(b\"OK\")"]);
    assert_eq!(tokens(b"+\r\n"), ["Simple(b\"\")"]);
    assert_eq!(tokens(b"-ERR no\r\n"), ["Error(b\"ERR no\")"]);
    assert_eq!(
        tokens(b":0\r\n:-5\r\n:0042\r\n"),
        ["Integer(0)", "Integer(-5)", "Integer(42)"]
    );
    assert_eq!(
        tokens(b":9223372036854775807\r\n:-9223372036854775808\r\n"),
        [
            "Integer(9223372036854775807)",
            "Integer(-9223372036854775808)"
        ]
    );
    assert_eq!(tokens(b"$3\r\nfoo\r\n"), ["Bulk(b\"foo\")"]);
    assert_eq!(tokens(b"$0\r\n\r\n"), ["Bulk(b\"\")"]);
    assert_eq!(
        tokens(b"$4\r\n\r\n\0\xff\r\n"),
        ["Bulk(b\"\\r\\n\\x00\\xff\")"]
    );
    assert_eq!(tokens(b"$-1\r\n"), ["Null(Bulk)"]);
    assert_eq!(tokens(b"*-1\r\n"), ["Null(Array)"]);
    assert_eq!(tokens(b"*0\r\n"), ["Array(0)"]);
    assert_eq!(
        tokens(b"*3\r\n:1\r\n$1\r\na\r\n*1\r\n+x\r\n"),
        [
            "Array(3)",
            "Integer(1)",
            "Bulk(b\"a\")",
            "Array(1)",
            "Simple(b\"x\")"
        ]
    );
}

#[test]
fn resp3_types() {
    assert_eq!(tokens(b"_\r\n"), ["Null(Null)"]);
    assert_eq!(tokens(b"#t\r\n#f\r\n"), ["Boolean(true)", "Boolean(false)"]);
    assert_eq!(
        tokens(b",3.14\r\n,-1\r\n,1e10\r\n,2.5E-3\r\n,inf\r\n,-inf\r\n,0.0\r\n"),
        [
            "Double(3.14)",
            "Double(-1.0)",
            "Double(10000000000.0)",
            "Double(0.0025)",
            "Double(inf)",
            "Double(-inf)",
            "Double(0.0)"
        ]
    );
    assert_eq!(
        tokens(b"(3492890328409238509324850943850943825024385\r\n(-1\r\n"),
        [
            "BigNumber(b\"3492890328409238509324850943850943825024385\")",
            "BigNumber(b\"-1\")"
        ]
    );
    assert_eq!(
        tokens(b"!21\r\nSYNTAX invalid syntax\r\n"),
        ["BulkError(b\"SYNTAX invalid syntax\")"]
    );
    assert_eq!(
        tokens(b"=15\r\ntxt:Some string\r\n=4\r\nmkd:\r\n"),
        [
            "Verbatim { format: b\"txt\", text: b\"Some string\" }",
            "Verbatim { format: b\"mkd\", text: b\"\" }"
        ]
    );
    assert_eq!(
        tokens(b"%2\r\n+a\r\n:1\r\n+b\r\n%0\r\n"),
        [
            "Map(2)",
            "Simple(b\"a\")",
            "Integer(1)",
            "Simple(b\"b\")",
            "Map(0)"
        ]
    );
    assert_eq!(
        tokens(b"~2\r\n:1\r\n:2\r\n"),
        ["Set(2)", "Integer(1)", "Integer(2)"]
    );
    assert_eq!(
        tokens(b">2\r\n$7\r\nmessage\r\n:1\r\n"),
        ["Push(2)", "Bulk(b\"message\")", "Integer(1)"]
    );
}

#[test]
fn frame_ends() {
    assert_eq!(ends(b"+OK\r\n:1\r\n"), [true, true]);
    assert_eq!(
        ends(b"*2\r\n:1\r\n*1\r\n:2\r\n:3\r\n"),
        [false, false, false, true, true]
    );
    assert_eq!(ends(b"*0\r\n%0\r\n~0\r\n>0\r\n"), [true, true, true, true]);
    assert_eq!(
        ends(b"%1\r\n*0\r\n*1\r\n_\r\n"),
        [false, false, false, true]
    );
}

#[test]
fn attributes_annotate_the_next_value() {
    // At top level: the attribute and the value form one reply.
    let input = b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.1923\r\n*1\r\n:2\r\n";
    let (out, error) = whole(Limits::DEFAULT, input);
    assert_eq!(error, None);
    let marks: Vec<bool> = out.iter().map(|t| t.1).collect();
    assert_eq!(marks, [false, false, false, false, false, false, true]);
    // Inside an array it is not an element: the array still needs two.
    assert_eq!(
        ends(b"*2\r\n|1\r\n+k\r\n+v\r\n:1\r\n|0\r\n:2\r\n"),
        [false, false, false, false, false, false, true]
    );
    assert_eq!(ends(b"|0\r\n:1\r\n"), [false, true]);
}

#[test]
fn streamed_strings() {
    let input = b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;1\r\nd\r\n;0\r\n";
    assert_eq!(
        tokens(input),
        [
            "StreamedString",
            "Chunk(b\"Hell\")",
            "Chunk(b\"o wor\")",
            "Chunk(b\"d\")",
            "End"
        ]
    );
    assert_eq!(ends(input), [false, false, false, false, true]);
    assert_eq!(
        ends(b"*2\r\n$?\r\n;0\r\n:1\r\n"),
        [false, false, false, true]
    );
}

#[test]
fn streamed_aggregates() {
    assert_eq!(
        tokens(b"*?\r\n:1\r\n*1\r\n:2\r\n.\r\n"),
        [
            "StreamedArray",
            "Integer(1)",
            "Array(1)",
            "Integer(2)",
            "End"
        ]
    );
    assert_eq!(ends(b"*?\r\n:1\r\n.\r\n"), [false, false, true]);
    assert_eq!(ends(b"~?\r\n.\r\n"), [false, true]);
    assert_eq!(
        tokens(b"%?\r\n+a\r\n:1\r\n.\r\n"),
        ["StreamedMap", "Simple(b\"a\")", "Integer(1)", "End"]
    );
    assert_eq!(
        ends(b"*1\r\n~?\r\n+x\r\n.\r\n"),
        [false, false, false, true]
    );
}

#[test]
fn token_debug_is_readable() {
    assert_eq!(
        format!("{:?}", Token::Bulk(b"a\r\n\x00")),
        "Bulk(b\"a\\r\\n\\x00\")"
    );
    let verbatim = Token::Verbatim {
        format: *b"txt",
        text: b"hi",
    };
    assert_eq!(
        format!("{verbatim:?}"),
        "Verbatim { format: b\"txt\", text: b\"hi\" }"
    );
    assert_eq!(
        Error::BulkTooLong { limit: 4 }.to_string(),
        "RESP bulk string longer than the limit of 4 bytes"
    );
}
