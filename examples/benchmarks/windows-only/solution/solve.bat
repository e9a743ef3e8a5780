@echo off
echo Hello> C:\app\hello.txt
