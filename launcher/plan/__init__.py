"""WHICH configuration runs, without torch.

The plan: every rung of the ladder judged for the card and the choice (`choose`), each rung's verdict and its
reason (`verdict`), the candidate and plan records and `plan --json` (`candidate`), the fit table of common
cards (`cards`), a candidate's solver keys as JSON (`settings`).
The fit solver, which derives the configuration of a model that learns most per hour on a card: the entry
point and why nothing fits (`solve`), what it moves and maximises (`levers`), what a profile means to learn
(`ambition`), whether a configuration fits and how fast it runs, with its vLLM share (`judge`), the search
(`search`), its answer as data (`outcome`) and the refusals `plan --json` carries, worded (`wording`); the
configurations a model gets from the rungs' intents and over several GPUs (`derive`).
What a configuration is worth and takes: learning per update (`value`), the step time (`speed`), the
completion cap (`lengths`), the turns with tools (`turns`), the run's steps and hours (`duration`), what stays
free (`margins`)."""
