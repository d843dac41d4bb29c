//! Multi-turn conversations (`request.conversation`): the history of one conversation and the
//! user turns still to send.
//!
//! Turn k sends the system prompt (if any), every earlier user message with the assistant
//! message that followed it, and user message k. The assistant messages are the answers this
//! run got (`reply: model`, the default: what a real user sees) or the dataset's recorded
//! replies (`reply: recorded`: the same history whatever the server says, so runs against
//! different servers send identical prompts). A turn that fails ends its conversation (a
//! user without an answer does not go on); the turns left are not sent.

use std::collections::VecDeque;

use serde_json::{Value, json};

use crate::loadgen::{
    scenario::dataset::Turn,
    scenario::{ConversationSpec, ReplySource},
};

/// Words the shared system prompt cycles through.
const SYSTEM_WORDS: &[&str] = &[
    "You",
    "are",
    "a",
    "careful",
    "assistant",
    "answering",
    "questions",
    "about",
    "systems",
    "software",
    "and",
    "data",
    "clearly",
    "and",
    "briefly.",
];

/// The shared system prompt of `words` words: the same text in every conversation of a phase.
#[must_use]
pub fn system_prompt(words: u32) -> String {
    let mut s = String::new();
    for i in 0..words as usize {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(SYSTEM_WORDS[i % SYSTEM_WORDS.len()]);
    }
    s
}

/// Inference consistency entropy of a conversation: the standard deviation (population) of
/// its turns' mean token entropies; `None` below two turns with entropies.
#[must_use]
pub fn ice(turn_entropies: &[f64]) -> Option<f64> {
    let n = turn_entropies.len();
    if n < 2 {
        return None;
    }
    let mean = turn_entropies.iter().sum::<f64>() / n as f64;
    let var = turn_entropies
        .iter()
        .map(|h| (h - mean).powi(2))
        .sum::<f64>()
        / n as f64;
    Some(var.sqrt())
}

/// One conversation in progress.
#[derive(Debug, Clone)]
pub struct Conversation {
    messages: Vec<Value>,
    pending: VecDeque<Turn>,
    /// The recorded reply of the turn in flight (for `reply: recorded`).
    in_flight: Option<Turn>,
    reply: ReplySource,
    sent: u32,
}

/// What a turn sends.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// The whole history and the new user message.
    pub messages: Vec<Value>,
    /// 1-based turn number.
    pub turn: u32,
    /// The recorded reply's length, a `max_tokens` hint.
    pub reply_tokens: Option<u32>,
}

impl Conversation {
    /// A conversation of `turns` (at most `spec.turns` of them), after `system` if given.
    #[must_use]
    pub fn new(spec: &ConversationSpec, system: Option<&str>, turns: Vec<Turn>) -> Self {
        let messages = system
            .map(|s| vec![json!({"role": "system", "content": s})])
            .unwrap_or_default();
        Self {
            messages,
            pending: turns.into_iter().take(spec.turns as usize).collect(),
            in_flight: None,
            reply: spec.reply,
            sent: 0,
        }
    }

    /// The next turn, or `None` when every turn was sent.
    pub fn next_turn(&mut self) -> Option<TurnRequest> {
        let t = self.pending.pop_front()?;
        self.messages
            .push(json!({"role": "user", "content": t.user}));
        self.sent += 1;
        let req = TurnRequest {
            messages: self.messages.clone(),
            turn: self.sent,
            reply_tokens: t.reply_tokens(),
        };
        self.in_flight = Some(t);
        Some(req)
    }

    /// The answer of the turn in flight arrived (`text`: what the model said, when kept):
    /// it joins the history.
    pub fn answered(&mut self, text: Option<String>) {
        let recorded = self.in_flight.take().and_then(|t| t.reply);
        let content = match self.reply {
            ReplySource::Recorded => recorded.unwrap_or_default(),
            ReplySource::Model => text.unwrap_or_default(),
        };
        self.messages
            .push(json!({"role": "assistant", "content": content}));
    }

    /// Whether the model's answer text is needed for the history.
    #[must_use]
    pub fn wants_model_text(&self) -> bool {
        self.reply == ReplySource::Model
    }

    /// Turns still to send.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(turns: u32, reply: ReplySource) -> ConversationSpec {
        ConversationSpec {
            turns,
            think_time: std::time::Duration::ZERO,
            reply,
            system_prompt_words: None,
            logprobs: None,
        }
    }

    fn turn(user: &str, reply: &str) -> Turn {
        Turn {
            user: user.into(),
            reply: Some(reply.into()),
        }
    }

    #[test]
    fn each_turn_sends_the_history_so_far() {
        let turns = vec![turn("q1", "a1 a1"), turn("q2", "a2"), turn("q3", "a3")];
        let mut c = Conversation::new(&spec(2, ReplySource::Model), Some("sys"), turns);
        let t1 = c.next_turn().unwrap();
        assert_eq!(t1.turn, 1);
        assert_eq!(t1.reply_tokens, Some(2));
        assert_eq!(
            t1.messages,
            vec![
                json!({"role": "system", "content": "sys"}),
                json!({"role": "user", "content": "q1"})
            ]
        );
        c.answered(Some("model said".into()));
        let t2 = c.next_turn().unwrap();
        assert_eq!(t2.messages.len(), 4);
        assert_eq!(
            t2.messages[2],
            json!({"role": "assistant", "content": "model said"})
        );
        assert_eq!(t2.messages[3], json!({"role": "user", "content": "q2"}));
        c.answered(None);
        // `turns: 2` caps the three recorded turns.
        assert!(c.next_turn().is_none());
    }

    #[test]
    fn recorded_replies_ignore_the_model() {
        let turns = vec![turn("q1", "a1"), turn("q2", "a2")];
        let mut c = Conversation::new(&spec(4, ReplySource::Recorded), None, turns);
        assert!(!c.wants_model_text());
        c.next_turn().unwrap();
        c.answered(Some("whatever".into()));
        let t2 = c.next_turn().unwrap();
        assert_eq!(
            t2.messages[1],
            json!({"role": "assistant", "content": "a1"})
        );
        assert_eq!(c.remaining(), 0);
    }

    #[test]
    fn ice_is_the_spread_of_turn_entropies() {
        assert_eq!(ice(&[1.0]), None);
        assert_eq!(ice(&[0.5, 0.5, 0.5]), Some(0.0));
        // Mean 2, deviations -1 and 1: population standard deviation 1.
        assert!((ice(&[1.0, 3.0]).unwrap() - 1.0).abs() < 1e-12);
        // 2, 4, 4, 4, 5, 5, 7, 9: the textbook population standard deviation 2.
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert!((ice(&v).unwrap() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn the_system_prompt_has_the_words_asked() {
        assert_eq!(system_prompt(3), "You are a");
        assert_eq!(system_prompt(200).split(' ').count(), 200);
        assert_eq!(system_prompt(0), "");
    }
}
