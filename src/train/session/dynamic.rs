//! What a task whose every step differs (trees) holds in the step region:
//! measured on a planning engine, for `bumpgrad memory`.

use super::Session;
use crate::memory::DynamicSteps;
use crate::train::shapes::StepKind;
use crate::Result;

impl Session {
    /// For a task whose every step is a shape of its own, on a planning
    /// engine: its largest step (every step before the first epoch is),
    /// traced as a plan for its lower bound, then every step of the first
    /// epoch, bump-allocated as training runs them. `None` for any other
    /// task.
    pub(crate) fn dynamic_steps(&mut self) -> Result<Option<DynamicSteps>> {
        if !self.task.dynamic() {
            return Ok(None);
        }
        self.memory_plan = true;
        let traced = self.train_step(0);
        self.memory_plan = false;
        traced?;
        let key = self.key(StepKind::Train, 0)?;
        let plan = self.engine.arena().plans().iter().find(|p| p.key == key);
        let (largest, lower_bound) = plan.map_or((0, 0), |p| (p.bump_bytes, p.lower_bound));
        self.begin_epoch(1, 0)?;
        let steps = self.steps_per_epoch();
        let (mut sum, mut most) = (0, 0);
        for step in 0..steps {
            self.train_step(step)?;
            let bytes = self.engine.arena().stats().last_step_bytes;
            sum += bytes;
            most = most.max(bytes);
        }
        Ok(Some(DynamicSteps {
            largest_bytes: largest,
            largest_lower_bound_bytes: lower_bound,
            steps,
            mean_bytes: sum / steps.max(1),
            most_bytes: most,
        }))
    }
}
