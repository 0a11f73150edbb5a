"""The broker's coordinators: each answers for the keys of its kind (today consumer groups,
``group/``) and keeps their state in a compacted internal topic of Kafka's.
"""
