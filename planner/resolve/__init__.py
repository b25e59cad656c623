"""What a user said (command-line flags, plan sections, engine configs) to one validated Job."""
