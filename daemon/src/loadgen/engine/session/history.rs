//! An agent's context: its system prompt, its task, then what came after (answers, tool
//! results, sub-agents' results, summaries), each with its length in tokens as the client
//! counts them, and the compaction that shortens it.
//!
//! A call's messages are the system prompt, then the task as the first user message, then
//! each entry; entries of the user side that follow each other (tool results, sub-agents'
//! results) go in one user message, separated by a blank line, so that roles alternate as
//! chat templates want. A call never ends on the model's own answer: when the last entry is
//! an answer, a one-token user message `Continue.` is added first.
//!
//! Tokens: made-up text (system prompt, task, tool results) is words of at most 8 lowercase
//! letters, one token each on the sim's tokenizer and a whole word on most others, so its
//! length is exact; an answer counts its `completion_tokens`; other text (a tool endpoint's
//! answer, a dataset prompt) its whitespace-separated words.

use std::{collections::VecDeque, sync::Arc};

use serde_json::{Value, json};

/// What made-up text is made of: words of at most 8 lowercase letters, each one token on the
/// sim's tokenizer and a whole piece of the random-weight llama model the root tests write
/// (`tests/engine/write_model.py`).
const WORDS: [&str; 32] = [
    "cache", "memory", "token", "queue", "latency", "request", "server", "engine", "batch", "slot",
    "prompt", "answer", "kernel", "network", "gpu", "cpu", "thread", "socket", "stream", "vector",
    "index", "search", "rank", "embed", "tool", "call", "service", "model", "data", "load",
    "value", "result",
];

/// The user message that stands before a call when the context ends on an answer.
const CONTINUE: &str = "Continue.";

/// `tokens` words of made-up text, drawn by `seed` (the same seed, the same text).
#[must_use]
pub fn filler(tokens: u32, seed: u64) -> String {
    let mut out = String::with_capacity(tokens as usize * 7);
    let mut h = seed;
    for i in 0..tokens {
        // splitmix64: a different word sequence per seed.
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if i > 0 {
            out.push(' ');
        }
        out.push_str(WORDS[(z % WORDS.len() as u64) as usize]);
    }
    out
}

/// Tokens of text the client did not make up: its whitespace-separated words.
#[must_use]
pub fn count(text: &str) -> u32 {
    u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX)
}

/// Who an entry is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The model's answer.
    Assistant,
    /// The user side: the task, tool results, sub-agents' results, summaries.
    User,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Assistant => "assistant",
            Role::User => "user",
        }
    }
}

/// One piece of a context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Who it is from.
    pub role: Role,
    /// Its text.
    pub text: String,
    /// Its length, tokens as the client counts them.
    pub tokens: u32,
}

impl Entry {
    /// A user-side entry.
    #[must_use]
    pub fn user(text: String, tokens: u32) -> Self {
        Self {
            role: Role::User,
            text,
            tokens,
        }
    }

    /// The model's answer.
    #[must_use]
    pub fn answer(text: String, tokens: u32) -> Self {
        Self {
            role: Role::Assistant,
            text,
            tokens,
        }
    }
}

/// A system prompt shared by the agents of a phase: its text and its tokens.
pub type System = Option<(Arc<str>, u32)>;

/// An agent's context.
#[derive(Debug, Clone)]
pub struct History {
    system: System,
    task: Entry,
    turns: VecDeque<Entry>,
}

impl History {
    /// A context of the system prompt and the task.
    #[must_use]
    pub fn new(system: System, task: Entry) -> Self {
        Self {
            system,
            task,
            turns: VecDeque::new(),
        }
    }

    /// Its length: the system prompt, the task and every entry (client tokens).
    #[must_use]
    pub fn tokens(&self) -> u32 {
        self.system
            .as_ref()
            .map_or(0, |s| s.1)
            .saturating_add(self.task.tokens)
            .saturating_add(
                self.turns
                    .iter()
                    .fold(0u32, |n, e| n.saturating_add(e.tokens)),
            )
    }

    /// Appends an entry.
    pub fn push(&mut self, e: Entry) {
        self.turns.push_back(e);
    }

    /// Gets it ready for a call: when it ends on an answer, the one-token `Continue.` follows.
    pub fn ready(&mut self) {
        if self.turns.back().is_some_and(|e| e.role == Role::Assistant) {
            self.push(Entry::user(CONTINUE.into(), 1));
        }
    }

    /// The messages of a call on it.
    #[must_use]
    pub fn messages(&self) -> Vec<Value> {
        render(&self.system, std::iter::once(&self.task).chain(&self.turns))
    }

    /// The last answer in it, or the task when there is none yet (what a tool is asked about,
    /// what a sub-agent hands back).
    #[must_use]
    pub fn last_answer(&self) -> &Entry {
        self.turns
            .iter()
            .rev()
            .find(|e| e.role == Role::Assistant)
            .unwrap_or(&self.task)
    }

    /// Drops the oldest turns until it is at most `limit` tokens long, never the system
    /// prompt, the task or the newest turn; the entries dropped, oldest first. A turn is an
    /// entry and the user-side entries after it (an answer and its tools' results).
    pub fn drop_oldest(&mut self, limit: u32) -> Vec<Entry> {
        let mut dropped = Vec::new();
        while self.tokens() > limit && self.turns.len() > self.newest_turn() {
            dropped.extend(self.turns.pop_front());
            while self.turns.front().is_some_and(|e| e.role == Role::User) {
                dropped.extend(self.turns.pop_front());
            }
        }
        dropped
    }

    /// Entries of the newest turn: from the last answer on (the last entry alone when there
    /// is no answer yet).
    fn newest_turn(&self) -> usize {
        match self.turns.iter().rposition(|e| e.role == Role::Assistant) {
            Some(i) => self.turns.len() - i,
            None => self.turns.len().min(1),
        }
    }

    /// The messages of the call that summarises `dropped` in `tokens` words, and its length:
    /// the system prompt, the task, those entries, and the request for a summary.
    #[must_use]
    pub fn summary_request(&self, dropped: &[Entry], tokens: u32) -> (Vec<Value>, u32) {
        let ask = Entry::user(
            format!("Summarise the work above in at most {tokens} words."),
            9,
        );
        let entries: Vec<&Entry> = std::iter::once(&self.task)
            .chain(dropped)
            .chain(std::iter::once(&ask))
            .collect();
        let length = self
            .system
            .as_ref()
            .map_or(0, |s| s.1)
            .saturating_add(entries.iter().fold(0u32, |n, e| n.saturating_add(e.tokens)));
        (render(&self.system, entries.into_iter()), length)
    }

    /// Puts a summary where the entries it replaces were: first after the task.
    pub fn put_summary(&mut self, summary: Entry) {
        self.turns.push_front(summary);
    }
}

/// The chat messages of a context: the system prompt, then the entries, entries of one role
/// that follow each other in one message.
fn render<'a>(system: &System, entries: impl Iterator<Item = &'a Entry>) -> Vec<Value> {
    let mut out: Vec<(Role, String)> = Vec::new();
    for e in entries {
        match out.last_mut() {
            Some((role, text)) if *role == e.role => {
                text.push_str("\n\n");
                text.push_str(&e.text);
            }
            _ => out.push((e.role, e.text.clone())),
        }
    }
    system
        .iter()
        .map(|(s, _)| json!({"role": "system", "content": &**s}))
        .chain(
            out.into_iter()
                .map(|(role, text)| json!({"role": role.name(), "content": text})),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> History {
        History::new(
            Some((Arc::from(filler(10, 1).as_str()), 10)),
            Entry::user(filler(5, 2), 5),
        )
    }

    #[test]
    fn made_up_text_is_one_word_per_token_and_the_same_for_a_seed() {
        let a = filler(300, 7);
        assert_eq!(count(&a), 300);
        assert_eq!(a, filler(300, 7));
        assert_ne!(a, filler(300, 8));
        assert!(
            a.split(' ')
                .all(|w| w.len() <= 8 && w.bytes().all(|b| b.is_ascii_lowercase()))
        );
        assert_eq!(filler(0, 1), "");
    }

    #[test]
    fn messages_alternate_and_a_call_never_ends_on_an_answer() {
        let mut h = history();
        h.push(Entry::user("tool says".into(), 2));
        assert_eq!(h.tokens(), 17);
        let m = h.messages();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0]["role"], "system");
        assert!(m[1]["content"].as_str().unwrap().ends_with("\n\ntool says"));
        h.push(Entry::answer("done".into(), 1));
        assert_eq!(h.last_answer().text, "done");
        h.ready();
        let m = h.messages();
        assert_eq!(m.len(), 4);
        assert_eq!(m[3], json!({"role": "user", "content": "Continue."}));
        assert_eq!(h.tokens(), 19);
        // Ready twice: nothing more.
        h.ready();
        assert_eq!(h.messages().len(), 4);
    }

    #[test]
    fn compaction_drops_the_oldest_and_keeps_the_last() {
        let mut h = history();
        for i in 0..4 {
            h.push(Entry::answer(format!("a{i}"), 10));
            h.push(Entry::user(format!("r{i}"), 20));
        }
        assert_eq!(h.tokens(), 15 + 120);
        let dropped = h.drop_oldest(80);
        assert_eq!(dropped.len(), 4);
        assert_eq!(dropped[0].text, "a0");
        assert_eq!(h.tokens(), 75);
        // Nothing fits under 20: the newest turn stays.
        let dropped = h.drop_oldest(20);
        assert_eq!(dropped.len(), 2);
        assert_eq!(h.messages().last().unwrap()["content"], "r3");
        assert_eq!(h.tokens(), 45);
        // A turn goes whole: an answer and the results after it.
        let mut h = history();
        h.push(Entry::user("r".into(), 50));
        h.push(Entry::answer("a".into(), 10));
        h.push(Entry::user("r1".into(), 20));
        h.push(Entry::user("r2".into(), 20));
        h.push(Entry::answer("b".into(), 10));
        assert_eq!(h.drop_oldest(60).len(), 4);
        assert_eq!(h.tokens(), 25);
    }

    #[test]
    fn a_summary_request_holds_what_it_replaces_and_the_summary_goes_first() {
        let mut h = history();
        h.push(Entry::answer("a0".into(), 30));
        h.push(Entry::user("r0".into(), 30));
        h.push(Entry::answer("a1".into(), 30));
        let dropped = h.drop_oldest(60);
        assert_eq!(dropped.len(), 2);
        let (m, length) = h.summary_request(&dropped, 12);
        assert_eq!(length, 10 + 5 + 60 + 9);
        assert_eq!(m.len(), 4);
        assert_eq!(m[2]["content"], "a0");
        assert!(
            m[3]["content"]
                .as_str()
                .unwrap()
                .ends_with("at most 12 words.")
        );
        h.put_summary(Entry::user("short".into(), 12));
        assert_eq!(h.tokens(), 15 + 12 + 30);
        assert_eq!(
            h.messages()[1]["content"]
                .as_str()
                .unwrap()
                .rsplit("\n\n")
                .next(),
            Some("short")
        );
    }
}
