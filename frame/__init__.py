"""slowframe the appliance: config, themes, scheduler, daemon, display, buttons, and the `slowframe` command."""
