"""WHICH configuration runs: every candidate with its estimate and verdict and the choice (`choose`), and
how a plan is shown, as a table, JSON or the fit table of common cards (`view`)."""
