# Thin aliases for dev.py, which needs nothing but Python.
.PHONY: run test check openapi bench
run:
	python3 dev.py run
test:
	python3 dev.py test
check:
	python3 dev.py check
openapi:
	python3 dev.py openapi
