"""The lanes: gate, monitor and post-inference, and the safety stage that runs them."""
