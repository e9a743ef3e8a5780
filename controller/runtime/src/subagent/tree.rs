//! A session tree's limits, shared by the user's session and every subagent under it: how
//! deep children nest, how many start in all, and the root's `--max-cost` spent by all of
//! them together. Each refusal is the text the model gets as the call's result.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use super::SubagentLimits;

/// The limits of one tree of sessions.
#[derive(Debug)]
pub struct Tree {
    pub limits: SubagentLimits,
    /// The root's `--max-cost`, for the whole tree.
    pub max_cost: f64,
    /// The root user's task: what the classifier judges every session's calls against.
    pub root_task: String,
    spent: Mutex<f64>,
    started: AtomicU32,
}

impl Tree {
    pub fn new(limits: SubagentLimits, max_cost: f64, root_task: &str) -> Tree {
        Tree {
            limits,
            max_cost,
            root_task: root_task.to_owned(),
            spent: Mutex::new(0.0),
            started: AtomicU32::new(0),
        }
    }

    /// USD spent so far by every session of the tree.
    pub fn spent(&self) -> f64 {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A model reply's cost, in whichever session of the tree.
    pub fn add_cost(&self, cost: f64) {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner()) += cost;
    }

    /// Children started so far.
    pub fn started(&self) -> u32 {
        self.started.load(Ordering::SeqCst)
    }

    /// Whether a session at `depth` (0: the user's) may start one more child; counts it when
    /// it may.
    pub fn admit(&self, depth: u32) -> Result<(), String> {
        if depth >= self.limits.max_depth {
            return Err(match depth {
                0 => format!(
                    "the depth limit is {} (--agent-depth)",
                    self.limits.max_depth
                ),
                _ => format!(
                    "the depth limit is {} (--agent-depth), and this session is a subagent at depth {depth}: do the work yourself",
                    self.limits.max_depth
                ),
            });
        }
        let spent = self.spent();
        if spent >= self.max_cost {
            return Err(format!(
                "the cost budget (${:.2}, --max-cost) is spent (${spent:.2} so far, subagents included)",
                self.max_cost
            ));
        }
        let total = self.limits.max_total;
        self.started
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < total).then_some(n + 1)
            })
            .map(drop)
            .map_err(|_| {
                format!("{total} subagents have been started, the most this session tree may (--agent-max)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_log::WorkspaceMode;

    fn tree(max_depth: u32, max_total: u32) -> Tree {
        let limits = SubagentLimits {
            max_depth,
            max_parallel: 2,
            max_total,
            workspace: WorkspaceMode::Shared,
        };
        Tree::new(limits, 1.0, "the task")
    }

    #[test]
    fn depth_total_and_budget_refuse_with_the_flag_named() {
        let tree = tree(1, 2);
        assert!(tree.admit(0).is_ok());
        let deep = tree.admit(1).unwrap_err();
        assert!(
            deep.contains("--agent-depth") && deep.contains("depth 1"),
            "{deep}"
        );
        assert!(tree.admit(0).is_ok());
        let many = tree.admit(0).unwrap_err();
        assert!(many.contains("--agent-max"), "{many}");
        assert_eq!(tree.started(), 2);
        let budget = self::tree(3, 10);
        budget.add_cost(0.6);
        budget.add_cost(0.5);
        let spent = budget.admit(0).unwrap_err();
        assert!(spent.contains("$1.10 so far"), "{spent}");
    }
}
