//! Task prompts in CodeRouterBench's JSON-lines layout (`task_id`,
//! `dimension`, `language`, `difficulty`, `prompt`), read from text. The
//! bench builds its exact-length prompts from them and the page offers them
//! as starting conversations.

use serde::{Deserialize, Serialize};

/// The task a first visitor finds in the router page's conversation, so
/// their first *Decide* routes a real prompt: SWE-bench Verified
/// `astropy__astropy-14096` from CodeRouterBench OOD176 (MIT), verbatim (a
/// test checks it against `data/coderouterbench/ood176_sample.jsonl`).
pub const FIRST_TASK_ID: &str = "old112::astropy__astropy-14096";

/// [`FIRST_TASK_ID`]'s prompt.
pub const FIRST_TASK_PROMPT: &str = "Subclassed SkyCoord gives misleading attribute access message\nI'm trying to subclass `SkyCoord`, and add some custom properties. This all seems to be working fine, but when I have a custom property (`prop` below) that tries to access a non-existent attribute (`random_attr`) below, the error message is misleading because it says `prop` doesn't exist, where it should say `random_attr` doesn't exist.\r\n\r\n```python\r\nimport astropy.coordinates as coord\r\n\r\n\r\nclass custom_coord(coord.SkyCoord):\r\n    @property\r\n    def prop(self):\r\n        return self.random_attr\r\n\r\n\r\nc = custom_coord('00h42m30s', '+41d12m00s', frame='icrs')\r\nc.prop\r\n```\r\n\r\nraises\r\n```\r\nTraceback (most recent call last):\r\n  File \"test.py\", line 11, in <module>\r\n    c.prop\r\n  File \"/Users/dstansby/miniconda3/lib/python3.7/site-packages/astropy/coordinates/sky_coordinate.py\", line 600, in __getattr__\r\n    .format(self.__class__.__name__, attr))\r\nAttributeError: 'custom_coord' object has no attribute 'prop'\r\n```\n";

/// One task prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    #[serde(default)]
    pub dimension: String,
    #[serde(default)]
    pub language: String,
    #[serde(default)]
    pub difficulty: String,
    pub prompt: String,
}

impl Task {
    /// The first non-empty line of the prompt, shortened: what a menu shows.
    pub fn title(&self) -> String {
        let line = self.prompt.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
        let mut title: String = line.chars().take(80).collect();
        if line.chars().count() > 80 {
            title.push('…');
        }
        title
    }
}

/// Parses JSON lines; `source` names the text in errors ("line 3: …").
pub fn parse_jsonl(text: &str, source: &str) -> Result<Vec<Task>, String> {
    #[derive(Deserialize)]
    struct Line {
        #[serde(default)]
        task_id: Option<String>,
        #[serde(default)]
        dimension: Option<String>,
        #[serde(default)]
        language: Option<String>,
        #[serde(default)]
        difficulty: Option<String>,
        prompt: Option<String>,
    }
    let mut tasks = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let parsed: Line = serde_json::from_str(line).map_err(|e| format!("{source} line {}: not a JSON object: {e}", i + 1))?;
        let prompt = parsed.prompt.ok_or_else(|| format!("{source} line {}: no string field `prompt`", i + 1))?;
        tasks.push(Task {
            id: parsed.task_id.unwrap_or_else(|| format!("line-{}", i + 1)),
            dimension: parsed.dimension.unwrap_or_default(),
            language: parsed.language.unwrap_or_default(),
            difficulty: parsed.difficulty.unwrap_or_default(),
            prompt,
        });
    }
    if tasks.is_empty() {
        return Err(format!("{source}: no prompts"));
    }
    Ok(tasks)
}

/// Prompt texts from JSON lines (`.jsonl`) or from plain text, one prompt
/// per blank-line-separated block.
pub fn prompt_texts(text: &str, source: &str, jsonl: bool) -> Result<Vec<String>, String> {
    if jsonl {
        return Ok(parse_jsonl(text, source)?.into_iter().map(|t| t.prompt).collect());
    }
    let texts: Vec<String> = text.split("\n\n").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
    if texts.is_empty() {
        return Err(format!("{source}: no prompts"));
    }
    Ok(texts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tasks_and_names_bad_lines() {
        let text = "{\"task_id\":\"a\",\"prompt\":\"Fix the bug.\\nMore\",\"language\":\"python\"}\n\n{\"prompt\":\"x\"}\n";
        let tasks = parse_jsonl(text, "t.jsonl").unwrap();
        assert_eq!(tasks.len(), 2);
        assert_eq!((tasks[0].id.as_str(), tasks[0].title().as_str(), tasks[1].id.as_str()), ("a", "Fix the bug.", "line-3"));
        assert_eq!(
            parse_jsonl("{\"task_id\":1}", "t.jsonl").unwrap_err(),
            "t.jsonl line 1: not a JSON object: invalid type: integer `1`, expected a string at line 1 column 12"
        );
        assert_eq!(parse_jsonl("{}", "t.jsonl").unwrap_err(), "t.jsonl line 1: no string field `prompt`");
        assert_eq!(parse_jsonl("\n", "t.jsonl").unwrap_err(), "t.jsonl: no prompts");
        assert_eq!(prompt_texts("a\n\n\nb c\n", "p.txt", false).unwrap(), vec!["a", "b c"]);
    }

    #[test]
    fn the_vendored_sample_parses() {
        let text = include_str!("../../../data/coderouterbench/ood176_sample.jsonl");
        let tasks = parse_jsonl(text, "ood176_sample.jsonl").unwrap();
        assert_eq!(tasks.len(), 24);
        assert!(tasks.iter().all(|t| !t.prompt.is_empty() && !t.title().is_empty()));
    }
}

#[cfg(test)]
mod first_task {
    #[test]
    fn the_first_task_is_the_sample_files_text_verbatim() {
        let tasks = super::parse_jsonl(include_str!("../../../data/coderouterbench/ood176_sample.jsonl"), "sample").unwrap();
        let task = tasks.iter().find(|t| t.id == super::FIRST_TASK_ID).expect("the task is in the sample");
        assert_eq!(task.prompt, super::FIRST_TASK_PROMPT);
    }
}
