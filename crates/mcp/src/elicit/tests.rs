use super::form::{FormReply, describe_fields, fit_reply};
use super::*;
use serde_json::json;

fn booking() -> Value {
    json!({"type": "object", "required": ["party_size", "name", "time"], "properties": {
        "party_size": {"type": "integer", "minimum": 1, "maximum": 12, "description": "How many people"},
        "name": {"type": "string"},
        "time": {"type": "string", "enum": ["18:00", "19:00", "20:00"]},
        "vegetarian": {"type": "boolean"}
    }})
}

#[test]
fn a_reply_of_field_lines_is_read_as_the_schemas_types() {
    let reply = "@picogent party_size: 4\nname: Ada\ntime: 19:00\nvegetarian: yes";
    assert_eq!(
        fit_reply(reply, &booking()),
        FormReply::Fields(json!({"party_size": 4, "name": "Ada", "time": "19:00", "vegetarian": true}))
    );
    assert_eq!(
        fit_reply(r#"{"party_size": 2, "name": "Bo", "time": "18:00"}"#, &booking()),
        FormReply::Fields(json!({"party_size": 2, "name": "Bo", "time": "18:00"}))
    );
}

#[test]
fn a_reply_that_does_not_fit_says_why_and_a_decline_is_a_decline() {
    let FormReply::Unfit(why) = fit_reply("party_size: 20\nname: Ada\ntime: 19:00", &booking()) else { panic!() };
    assert!(why.contains("party_size") && why.contains("12"), "{why}");
    let FormReply::Unfit(why) = fit_reply("party_size: four\nname: Ada\ntime: 19:00", &booking()) else { panic!() };
    assert!(why.contains("not a whole number"), "{why}");
    let FormReply::Unfit(why) = fit_reply("name: Ada", &booking()) else { panic!() };
    assert!(why.contains("party_size"), "{why}");
    let FormReply::Unfit(why) = fit_reply("colour: red", &booking()) else { panic!() };
    assert!(why.contains("no field `colour`"), "{why}");
    assert_eq!(fit_reply("@picogent decline", &booking()), FormReply::Decline);
    assert_eq!(fit_reply("Cancel.", &booking()), FormReply::Cancel);
}

fn one(name: &str, property: Value) -> Value {
    json!({"type": "object", "required": [name], "properties": {name: property}})
}

#[test]
fn a_form_of_one_field_takes_the_whole_reply_as_its_value() {
    let time = one("time", json!({"type": "string", "enum": ["18:00", "19:00", "20:00"]}));
    assert_eq!(fit_reply("@picogent 19:00", &time), FormReply::Fields(json!({"time": "19:00"})));
    assert_eq!(fit_reply("time: 19:00", &time), FormReply::Fields(json!({"time": "19:00"})));
    assert_eq!(fit_reply("Time = 20:00", &time), FormReply::Fields(json!({"time": "20:00"})));
    let link = one("repository", json!({"type": "string", "format": "uri"}));
    assert_eq!(
        fit_reply("https://git.example.com/team/app", &link),
        FormReply::Fields(json!({"repository": "https://git.example.com/team/app"}))
    );
    // Not `field: value` with its name: the whole reply, colons and lines and all.
    let note = one("note", json!({"type": "string"}));
    assert_eq!(
        fit_reply("Remember: bring the cake\nand the candles", &note),
        FormReply::Fields(json!({"note": "Remember: bring the cake\nand the candles"}))
    );
    let city = one("city", json!({"type": "string"}));
    assert_eq!(fit_reply("{not json", &city), FormReply::Fields(json!({"city": "{not json"})));
}

#[test]
fn a_semicolon_splits_only_before_another_field() {
    assert_eq!(
        fit_reply("name: Ada; the tall one\nparty_size: 2\ntime: 18:00", &booking()),
        FormReply::Fields(json!({"name": "Ada; the tall one", "party_size": 2, "time": "18:00"}))
    );
    assert_eq!(
        fit_reply("name: Ada; party_size: 3; time: 20:00", &booking()),
        FormReply::Fields(json!({"name": "Ada", "party_size": 3, "time": "20:00"}))
    );
}

#[test]
fn field_names_are_read_in_any_case() {
    assert_eq!(
        fit_reply("Party_Size: 4\nNAME: Ada\n- `Time`: 19:00\nVegetarian: No.", &booking()),
        FormReply::Fields(json!({"party_size": 4, "name": "Ada", "time": "19:00", "vegetarian": false}))
    );
    assert_eq!(
        fit_reply(r#"{"Party_Size": 2, "Name": "Bo", "TIME": "18:00"}"#, &booking()),
        FormReply::Fields(json!({"party_size": 2, "name": "Bo", "time": "18:00"}))
    );
    // A link on a line of its own names no field.
    let FormReply::Unfit(why) = fit_reply("https://example.com\nname: Ada", &booking()) else { panic!() };
    assert!(!why.contains("https"), "{why}");
}

#[test]
fn no_to_a_single_yes_or_no_field_is_false_and_only_decline_words_decline() {
    let agree = one("agree", json!({"type": "boolean"}));
    assert_eq!(fit_reply("no", &agree), FormReply::Fields(json!({"agree": false})));
    assert_eq!(fit_reply("@picogent No.", &agree), FormReply::Fields(json!({"agree": false})));
    assert_eq!(fit_reply("no thanks", &agree), FormReply::Fields(json!({"agree": false})));
    assert_eq!(fit_reply("yes", &agree), FormReply::Fields(json!({"agree": true})));
    assert_eq!(fit_reply("decline", &agree), FormReply::Decline);
    assert_eq!(fit_reply("cancel", &agree), FormReply::Cancel);
    // Where `no` is no value, it declines.
    assert_eq!(fit_reply("No", &booking()), FormReply::Decline);
    assert_eq!(fit_reply("no", &one("city", json!({"type": "string"}))), FormReply::Decline);
    // Other words are answers, not declines.
    let FormReply::Unfit(_) = fit_reply("not sure", &agree) else { panic!() };
    assert_eq!(
        fit_reply("nope, not today", &one("why", json!({"type": "string"}))),
        FormReply::Fields(json!({"why": "nope, not today"}))
    );
}

#[test]
fn the_fields_are_described_and_server_text_cannot_mention_anyone() {
    let text = describe_fields(&booking());
    assert!(text.contains("- `party_size` (required): a whole number from 1 to 12 — How many people"), "{text}");
    assert!(text.contains("- `time` (required): one of `18:00`, `19:00`, `20:00`"), "{text}");
    assert!(text.contains("- `vegetarian` (optional): yes or no"), "{text}");
    assert!(!server_text("ping @bob").contains("@bob"));
    assert!(!server_text("book_@bob").contains('@'), "a tool's name is the server's text too");
}

#[test]
fn a_posted_link_works_as_sent_and_mentions_nobody() {
    let cases = [
        ("https://auth.example.com/x?s=1", Some("https://auth.example.com/x?s=1")),
        ("http://127.0.0.1:1/@bob?x=@picogent", Some("http://127.0.0.1:1/%40bob?x=%40picogent")),
        ("https://example.com/a#@alice", Some("https://example.com/a#%40alice")),
        (" https://example.com/%40bob ", Some("https://example.com/%40bob")),
        ("javascript:alert(1)", None),
        ("https://trusted.example@elsewhere.example/", None),
        ("https://-:@bob.example/", None),
        ("not a link", None),
    ];
    for (sent, posted) in cases {
        assert_eq!(posted_link(sent).as_deref(), posted, "{sent}");
    }
}
