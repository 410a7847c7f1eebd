"""The network as this machine sees it: its own names and addresses (:mod:`.addresses`) and its
ports (:mod:`.ports`). The ground floor: nothing here imports another layer of tfcluster."""
