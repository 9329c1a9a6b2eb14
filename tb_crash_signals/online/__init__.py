"""The online stage: the rules step by step inside a training loop (`Monitor`)."""
