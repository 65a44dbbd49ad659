//! Where a policy set's plan (`crate::engine::plan`) put a check: read by
//! the compiled pattern and CEL checks, which the plan numbers.

/// A check's place in a plan: the plan's id, its group (merged patterns,
/// or CEL checks evaluated together) and its number there. A slot of
/// another plan than the one evaluating is ignored, so a policy moved
/// between sets is never misread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanSlot {
    pub plan: u64,
    pub group: u32,
    pub index: u32,
}
