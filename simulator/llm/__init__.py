"""The language-model layer: request and response types, backends, the retry layer, rate limits
and the endpoint allow-list. It never imports the engine."""
