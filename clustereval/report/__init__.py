"""Pure rendering: records -> markdown, plots, lint, close-out."""
