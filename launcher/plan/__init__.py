"""WHICH configuration runs: every candidate with its estimate and verdict and the choice (`choose`), the fit
solver that derives the most ambitious configuration of a model for a card (`solve`), the configurations a
model gets from the rungs' intents and over several GPUs (`derive`), and how a plan is shown, as a table, JSON or
the fit table of common cards (`view`), a derived profile (`fit_view`) and a candidate's settings (`settings`)."""
