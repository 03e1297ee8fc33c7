"""The reference implementation of the course's Redis Streams worker (see ``solutions.billing``)."""
