"""Task labels and what a trainer reads from them: the task spec, an episode's plan and the
adapter settings, the sample shapes, probe labels and the label files each trainer loads."""
