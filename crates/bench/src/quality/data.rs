//! CodeRouterBench OOD176 as the evaluation reads it: tasks with their
//! prompts, and one recorded outcome (resolved, cost) per task × model.
//!
//! The data's traps are handled here, once: `task_id` names the benchmark
//! and is kept only as an identifier (never a feature); the 406 SWE-bench
//! rows with zero tokens and zero cost are failed runs, marked as such so
//! every total can be given both as recorded ($0, unresolved) and with their
//! cost imputed; the 64 newer tasks (`new64`) are a split of their own,
//! since they ran on newer model versions under the same labels.

use serde::{Deserialize, Serialize};

/// A malformed data file, named with the line and field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DataError {
    #[error("{file}, line {line}: {reason}")]
    Line { file: String, line: usize, reason: String },
    #[error("{file}: {reason}")]
    File { file: String, reason: String },
}

/// Which part of OOD176 a task belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Subset {
    /// All 176 tasks.
    All,
    /// The 112 SWE-bench Verified tasks (`old112`), the published table's subset.
    Swebench112,
    /// The 64 newer tasks (FeatureBench, long CLI, SWE-CI), run on newer model versions.
    New64,
}

impl Subset {
    pub const ALL: [Subset; 3] = [Subset::All, Subset::Swebench112, Subset::New64];

    pub fn label(self) -> &'static str {
        match self {
            Subset::All => "OOD176 (all 176)",
            Subset::Swebench112 => "SWE-bench 112",
            Subset::New64 => "newer 64",
        }
    }

    pub fn contains(self, task: &Task) -> bool {
        match self {
            Subset::All => true,
            Subset::Swebench112 => task.split == "old112",
            Subset::New64 => task.split != "old112",
        }
    }
}

/// One task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// An identifier only: it names the benchmark, so it is never a feature.
    pub id: String,
    /// `old112` or `new64`.
    pub split: String,
    pub bench: String,
    pub prompt: String,
}

/// One task × model outcome.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub resolved: bool,
    pub cost_usd: f64,
    /// Zero input and output tokens and zero cost: the run failed before
    /// doing anything (unresolved, recorded at $0).
    pub failed_run: bool,
}

/// The task × model matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// In the pool's order.
    pub models: Vec<String>,
    pub tasks: Vec<Task>,
    /// `[task][model]`.
    pub cells: Vec<Vec<Cell>>,
    /// `[task][model]`: the recorded cost, or for a failed run the model's
    /// mean cost over the runs of the same split that did run.
    pub imputed_cost: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
struct TaskLine {
    task_id: String,
    source_split: String,
    bench: String,
    prompt: String,
}

impl Dataset {
    /// Reads `ood176_tasks.jsonl` and `ood176_results_long.csv` (text in,
    /// names for errors) for the `models` given, in that order. Every task
    /// must have exactly one row per model.
    pub fn parse(
        tasks_jsonl: &str,
        tasks_file: &str,
        results_csv: &str,
        results_file: &str,
        models: &[&str],
    ) -> Result<Dataset, DataError> {
        let line_error = |file: &str, line: usize, reason: String| DataError::Line { file: file.to_string(), line, reason };
        let mut tasks = Vec::new();
        for (i, line) in tasks_jsonl.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let t: TaskLine = serde_json::from_str(line).map_err(|e| line_error(tasks_file, i + 1, e.to_string()))?;
            if tasks.iter().any(|o: &Task| o.id == t.task_id) {
                return Err(line_error(tasks_file, i + 1, format!("task `{}` appears twice", t.task_id)));
            }
            tasks.push(Task { id: t.task_id, split: t.source_split, bench: t.bench, prompt: t.prompt });
        }
        if tasks.is_empty() {
            return Err(DataError::File { file: tasks_file.into(), reason: "no tasks".into() });
        }
        let index: std::collections::HashMap<&str, usize> = tasks.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
        let mut cells: Vec<Vec<Option<Cell>>> = vec![vec![None; models.len()]; tasks.len()];

        let mut reader = csv::ReaderBuilder::new().from_reader(results_csv.as_bytes());
        let headers = reader.headers().map_err(|e| DataError::File { file: results_file.into(), reason: e.to_string() })?.clone();
        let column = |name: &str| {
            headers
                .iter()
                .position(|h| h == name)
                .ok_or_else(|| DataError::File { file: results_file.into(), reason: format!("no `{name}` column") })
        };
        let (c_task, c_model, c_resolved, c_in, c_out, c_cost) =
            (column("task_id")?, column("model")?, column("resolved")?, column("in_tok")?, column("out_tok")?, column("cost_usd")?);
        for (i, record) in reader.records().enumerate() {
            let line = i + 2;
            let record = record.map_err(|e| line_error(results_file, line, e.to_string()))?;
            let field = |c: usize| record.get(c).unwrap_or("");
            let number = |c: usize, name: &str| {
                field(c)
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| line_error(results_file, line, format!("`{name}` is `{}`, not a non-negative number", field(c))))
            };
            let Some(&t) = index.get(field(c_task)) else {
                return Err(line_error(results_file, line, format!("task `{}` is not in {tasks_file}", field(c_task))));
            };
            let Some(m) = models.iter().position(|m| *m == field(c_model)) else { continue };
            let resolved = match field(c_resolved) {
                "1" => true,
                "0" => false,
                other => return Err(line_error(results_file, line, format!("`resolved` is `{other}`, not 0 or 1"))),
            };
            let cost_usd = number(c_cost, "cost_usd")?;
            let failed_run = number(c_in, "in_tok")? == 0.0 && number(c_out, "out_tok")? == 0.0 && cost_usd == 0.0;
            if cells[t][m].replace(Cell { resolved, cost_usd, failed_run }).is_some() {
                return Err(line_error(results_file, line, format!("a second row for task `{}` × `{}`", field(c_task), models[m])));
            }
        }
        let cells: Vec<Vec<Cell>> = cells
            .into_iter()
            .enumerate()
            .map(|(t, row)| {
                row.into_iter()
                    .enumerate()
                    .map(|(m, c)| {
                        c.ok_or_else(|| DataError::File {
                            file: results_file.into(),
                            reason: format!("no row for task `{}` × `{}`", tasks[t].id, models[m]),
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()?;

        // A failed run's imputed cost: the model's mean over the runs of the
        // same split that did run.
        let mut imputed_cost: Vec<Vec<f64>> = cells.iter().map(|row| row.iter().map(|c| c.cost_usd).collect()).collect();
        for m in 0..models.len() {
            for split in ["old112", "new64"] {
                let ran: Vec<f64> = tasks
                    .iter()
                    .zip(&cells)
                    .filter(|(t, row)| t.split == split && !row[m].failed_run)
                    .map(|(_, row)| row[m].cost_usd)
                    .collect();
                let mean = if ran.is_empty() { 0.0 } else { ran.iter().sum::<f64>() / ran.len() as f64 };
                for (t, task) in tasks.iter().enumerate() {
                    if task.split == split && cells[t][m].failed_run {
                        imputed_cost[t][m] = mean;
                    }
                }
            }
        }
        Ok(Dataset { models: models.iter().map(|m| m.to_string()).collect(), tasks, cells, imputed_cost })
    }

    /// A task's index by id.
    pub fn task_index(&self, id: &str) -> Option<usize> {
        self.tasks.iter().position(|t| t.id == id)
    }

    /// A model's index by id.
    pub fn model_index(&self, id: &str) -> Option<usize> {
        self.models.iter().position(|m| m == id)
    }

    /// The tasks of `subset`, as indices.
    pub fn indices(&self, subset: Subset) -> Vec<usize> {
        (0..self.tasks.len()).filter(|&t| subset.contains(&self.tasks[t])).collect()
    }

    /// Failed runs in all.
    pub fn failed_runs(&self) -> usize {
        self.cells.iter().flatten().filter(|c| c.failed_run).count()
    }

    /// A copy restricted to `tasks` (indices), in that order.
    pub fn restricted(&self, tasks: &[usize]) -> Dataset {
        Dataset {
            models: self.models.clone(),
            tasks: tasks.iter().map(|&t| self.tasks[t].clone()).collect(),
            cells: tasks.iter().map(|&t| self.cells[t].clone()).collect(),
            imputed_cost: tasks.iter().map(|&t| self.imputed_cost[t].clone()).collect(),
        }
    }
}
