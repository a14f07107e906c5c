//! Presence at its own level: [`claim`] and the [`Heartbeat`] against the reference board, with
//! short beats. A copy's marker is read off the agent member's status as alice sees it; its id,
//! off its state.
//!
//! Nothing waits for a fixed time beyond what the protocol itself waits (a fresh claim's settle,
//! the watch of another copy's marker): a test waits for a claim to end, or for the copy to be
//! told it was superseded.

use std::sync::Arc;

use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use picogent_config::Config;
use picogent_state::State;
use picogent_support::secret::Secret;
use picogent_tracker::model::{MessageQuery, SendMessage};
use picogent_tracker::presence::{Beat, Marker, compose, new_copy_id, parse_status};
use picogent_tracker::{TrackerClient, TrackerError};

use super::{Model, WAIT, World};
use crate::presence::{Heartbeat, Presence, PresenceError, Timing, claim};
use crate::status::StatusBoard;

/// A short beat: a fresh claim settles for two of them.
const BEAT_MS: u64 = 100;

/// A world whose agent beats every `beat_ms`.
async fn world_beating(beat_ms: u64) -> World {
    World::start_with(Model::Open, json!({"presence": {"heartbeat_ms": beat_ms}})).await
}

/// The agent's config with its beat set to `beat_ms`.
fn beating(world: &World, beat_ms: u64) -> Config {
    let mut config = (*world.services.config).clone();
    config.presence.heartbeat_ms = beat_ms;
    config
}

/// The agent's own client, ungated, as `runtime::start` builds the heartbeat's.
fn agent_client(config: &Config) -> TrackerClient {
    TrackerClient::new(&crate::presence::tracker_config(config), Secret::new("tok-picogent")).unwrap()
}

/// A copy of the agent over `state` claims the member, as `runtime::start` does before it acts.
async fn claim_over(config: &Config, state: &State) -> Result<Presence, PresenceError> {
    tokio::time::timeout(WAIT, claim(config, agent_client(config), state)).await.expect("the claim ended")
}

/// The marker in the agent member's status, and the text before it, as alice reads them.
async fn marker(world: &World) -> (String, Option<Marker>) {
    let status = parse_status(&world.alice.get_member("picogent").await.unwrap().status);
    (status.text, status.marker)
}

/// A claimed copy's beats running, as `runtime::start` spawns them, with what they cancel.
struct Beating {
    heartbeat: Heartbeat,
    status: Arc<StatusBoard>,
    stream: CancellationToken,
    superseded: CancellationToken,
}

fn spawn(presence: Presence) -> Beating {
    let (status, stream, superseded) =
        (Arc::new(StatusBoard::default()), CancellationToken::new(), CancellationToken::new());
    let heartbeat = presence.spawn(status.clone(), stream.clone(), superseded.clone());
    Beating { heartbeat, status, stream, superseded }
}

/// A copy that starts with no marker on the member writes its own after the status text people
/// wrote, keeps its id in its state, waits out a whole lease before it acts, and then may write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_copy_marks_the_member_keeps_its_id_and_then_writes() {
    let world = world_beating(BEAT_MS).await;
    let config = beating(&world, BEAT_MS);
    agent_client(&config).update_my_status("Working on the docs").await.unwrap();
    assert_eq!(marker(&world).await, ("Working on the docs".to_string(), None));

    let started = Instant::now();
    let presence = claim_over(&config, &world.state).await.expect("no other copy: the claim holds");

    let settle = Timing::from_config(&config.presence).settle();
    assert!(started.elapsed() >= settle, "it waited {:?} for a copy starting beside it", started.elapsed());
    let (text, found) = marker(&world).await;
    let found = found.expect("a marker");
    assert_eq!((text.as_str(), found.copy_id.as_str()), ("Working on the docs", presence.copy_id()));
    assert!(matches!(found.beat, Beat::Count(_)), "{found:?}");
    let kept = world.state.get_value("presence.copy_id").await.unwrap();
    assert_eq!(kept.as_deref(), Some(presence.copy_id()), "the id is kept for the next start");
    // Its gate lets its writes out.
    let gated = TrackerClient::new(&config.tracker, Secret::new("tok-picogent")).unwrap().with_gate(presence.gate());
    let chat_id = world.alice.get_project("team").await.unwrap().chat_id;
    let hello = SendMessage { content: "hello".into(), chat_id: Some(chat_id), ..SendMessage::default() };
    gated.send_message(&hello, None).await.expect("a claimed copy writes");
    world.shut_down(None).await;
}

/// A copy restarted over the same state finds its own marker and goes on at once: no watch, no
/// settle (its beat here is long, so either would take seconds), the same id, its marker written
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_the_same_copy_goes_on_at_once() {
    let world = world_beating(BEAT_MS).await;
    let first = claim_over(&beating(&world, BEAT_MS), &world.state).await.unwrap();
    let copy_id = first.copy_id().to_string();
    // It stops without a word, as a crash does: its marker stays as it was.
    drop(first);
    let (_, before) = marker(&world).await;

    let config = beating(&world, 5_000);
    let timing = Timing::from_config(&config.presence);
    let at_once = timing.settle().min(timing.watch());
    let restarted = tokio::time::timeout(at_once, claim(&config, agent_client(&config), &world.state))
        .await
        .expect("its own marker: it went on with no watch and no settle")
        .expect("its own marker: the claim holds");

    assert_eq!(restarted.copy_id(), copy_id, "the same copy");
    let (_, after) = marker(&world).await;
    let after = after.expect("a marker");
    assert_eq!(after.copy_id, copy_id);
    assert_ne!(Some(&after), before.as_ref(), "the restart wrote its marker again");
    world.shut_down(None).await;
}

/// A copy with other state, starting while the first one beats, watches the first one's marker
/// move and refuses to start, naming both copies; the first goes on, and leaves a stopped marker
/// when it stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_copy_with_other_state_is_refused_while_the_first_beats() {
    // Long enough that the first copy's beats are never late by the two and a half beats the
    // second one watches, on a busy machine.
    let beat_ms = 500;
    let world = world_beating(beat_ms).await;
    let config = beating(&world, beat_ms);
    let first = claim_over(&config, &world.state).await.unwrap();
    let first_id = first.copy_id().to_string();
    let first = spawn(first);
    let other_dir = tempfile::tempdir().unwrap();
    let other_state = State::open(&other_dir.path().join("state.db")).await.unwrap();

    let refused = claim_over(&config, &other_state).await.err().expect("the second copy is refused");

    let PresenceError::AnotherCopy { other, mine, slug, state } = &refused else { panic!("{refused}") };
    let second_id = other_state.get_value("presence.copy_id").await.unwrap().expect("the second copy's id");
    assert_eq!((other, mine, slug.as_str()), (&first_id, &second_id, "picogent"), "{refused}");
    assert_eq!(*state, other_state.location());
    assert_ne!(first_id, second_id);
    let (_, found) = marker(&world).await;
    assert_eq!(found.expect("a marker").copy_id, first_id, "the second copy left the first one's marker");
    assert!(!first.superseded.is_cancelled() && first.status.superseded().is_none(), "the first copy goes on");

    first.heartbeat.finish().await;
    let (_, found) = marker(&world).await;
    assert_eq!(
        found,
        Some(Marker { copy_id: first_id, beat: Beat::Stopped, can: Vec::new() }),
        "a clean stop is signed off"
    );
    other_state.close().await;
    world.shut_down(None).await;
}

/// Another copy writes its marker over this one's: this copy's next beat (here the one a status
/// change asks for at once, so no beat of its own races the other copy's write) finds it and
/// stops acting: its gate refuses every write, its event stream is stopped, its status says why,
/// and it leaves the other copy's marker alone when it finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_whose_marker_another_copy_overwrote_stops_writing() {
    let world = world_beating(BEAT_MS).await;
    drop(claim_over(&beating(&world, BEAT_MS), &world.state).await.unwrap());
    // Restarted with a long beat: no beat of its own comes during the test.
    let config = beating(&world, 10_000);
    let presence = claim_over(&config, &world.state).await.unwrap();
    let gated = TrackerClient::new(&config.tracker, Secret::new("tok-picogent")).unwrap().with_gate(presence.gate());
    let copy = spawn(presence);
    let chat_id = world.alice.get_project("team").await.unwrap().chat_id;
    let said =
        |text: &str| SendMessage { content: text.into(), chat_id: Some(chat_id.clone()), ..SendMessage::default() };
    gated.send_message(&said("before"), None).await.expect("the copy writes while it holds the member");

    let newer = Marker { copy_id: new_copy_id(), beat: Beat::Count(1), can: Vec::new() };
    agent_client(&config).write_my_status_before(&compose("", &newer), None).await.unwrap();
    let changed = gated.update_my_status("Reviewing").await;

    assert!(matches!(changed, Err(TrackerError::Superseded { .. })), "{changed:?}");
    tokio::time::timeout(WAIT, copy.superseded.cancelled()).await.expect("the copy was told it was superseded");
    assert!(copy.stream.is_cancelled(), "its event stream stops");
    let reason = copy.status.superseded().expect("its status says why").to_string();
    assert!(reason.contains(&newer.copy_id), "{reason}");
    let refused = gated.send_message(&said("after"), None).await;
    assert!(matches!(refused, Err(TrackerError::Superseded { .. })), "{refused:?}");
    let query = MessageQuery { chat_id: Some(chat_id.clone()), ..MessageQuery::default() };
    let posted: Vec<String> =
        world.alice.list_messages(&query).await.unwrap().into_iter().map(|message| message.content).collect();
    assert_eq!(posted, ["before"], "nothing went out after the other copy took over");

    copy.heartbeat.finish().await;
    assert_eq!(marker(&world).await, (String::new(), Some(newer)), "the newer copy's marker stays");
    world.shut_down(None).await;
}
