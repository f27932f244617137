"""slowframe the appliance: config, themes, scheduler, daemon, display, buttons."""
